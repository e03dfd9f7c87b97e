# SPDX-License-Identifier: GPL-2.0
#
# kiwarp top-level build.
#
#   make            kiwarp.ko, libkiwarp, tools, test programs
#   make run        set up everything, boot the VM, load kiwarp.ko and move
#                   real data (Send/Recv, RDMA Write, RDMA Read; CRC on/off)
#   make check      every test: unit tests, library tests, fuzz smoke, VM
#                   tests on Debian's kernel and on a KASAN/lockdep debug
#                   kernel, interop with upstream siw/rdma-core; the last
#                   line is "N passed, N failed"
#   make bench      kiwarp vs TCP vs upstream siw (ratios, one VM run)
#   make fuzz       long campaigns: libFuzzer on the core (52M executions),
#                   then on the debug kernel the /dev/kiwarp fuzzer, the
#                   hostile-peer mutations and the fault tests (hours;
#                   Documentation/security.md section 4)
#   make install    module (to /lib/modules/$(KVER)/extra) and libkiwarp
#                   (DESTDIR/PREFIX honoured)
#
# KDIR selects the kernel build tree: the running kernel's if it has one
# (a real machine), else Debian's 6.1 headers (the VM tests).

KVER ?= $(shell uname -r)
ifeq ($(KDIR),)
  ifneq ($(wildcard /lib/modules/$(KVER)/build/Makefile),)
    KDIR := /lib/modules/$(KVER)/build
  else
    KVER := $(shell dpkg-query -W -f='$${Depends}' linux-headers-amd64 2>/dev/null | \
		sed -n 's/.*linux-headers-\([0-9][^ ,]*-amd64\).*/\1/p')
    KDIR := /usr/src/linux-headers-$(KVER)
  endif
endif

PREFIX ?= /usr/local
VM_TIMEOUT ?= 3000

all: module lib tools tests

module:
	$(MAKE) -C $(KDIR) M=$(CURDIR) modules

lib:
	$(MAKE) -C lib

tools: lib
	$(MAKE) -C tools

tests: lib
	$(MAKE) -C selftests/unit
	$(MAKE) -C selftests/vm
	$(MAKE) -C selftests/vmfuzz
	$(MAKE) -C selftests/interop

deps:
	scripts/deps

# Fresh machine: install what is needed, then rebuild with KDIR re-derived.
run: deps
	$(MAKE) all
	scripts/vm-run --accel tcg --timeout 900 -- tools/kiwarp-demo

check: deps
	$(MAKE) all
	VM_TIMEOUT=$(VM_TIMEOUT) selftests/run_all.sh

# kiwarp vs plain TCP vs upstream siw, side by side in one VM boot
bench: deps
	$(MAKE) all
	tools/kiwarp-bench

fuzz: deps
	$(MAKE) all
	scripts/fuzz-campaign

install: module lib tools
	$(MAKE) -C $(KDIR) M=$(CURDIR) INSTALL_MOD_DIR=extra \
		INSTALL_MOD_PATH=$(DESTDIR) DEPMOD=/bin/true modules_install
	$(MAKE) -C lib install PREFIX=$(PREFIX) DESTDIR=$(DESTDIR)
	$(MAKE) -C tools install PREFIX=$(PREFIX) DESTDIR=$(DESTDIR)
	@test -n "$(DESTDIR)" || depmod -a $(KVER)

clean:
	$(MAKE) -C $(KDIR) M=$(CURDIR) clean || true
	$(MAKE) -C lib clean
	$(MAKE) -C tools clean
	$(MAKE) -C selftests/unit clean
	$(MAKE) -C selftests/vm clean
	$(MAKE) -C selftests/vmfuzz clean
	$(MAKE) -C selftests/interop clean

.PHONY: fuzz all module lib tools tests deps run check bench install clean
