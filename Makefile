# SPDX-License-Identifier: GPL-2.0
#
# kiwarp top-level build.
#
#   make            kiwarp.ko for the running kernel, libkiwarp, tools
#   make run        set up everything, boot the VM, load kiwarp.ko and move
#                   real data (Send/Recv, RDMA Write, RDMA Read; CRC on/off)
#   make check      every test: unit tests, library tests, fuzz smoke, VM
#                   tests and interop with upstream siw/rdma-core on Debian's
#                   6.1, 6.12 and newest kernels, the VM tests on a
#                   KASAN/lockdep debug kernel; the last line is
#                   "N passed, N failed"
#   make bench      kiwarp vs TCP vs upstream siw (ratios, one VM run)
#   make fuzz       long campaigns: libFuzzer on the core (52M executions),
#                   then on the debug kernel the /dev/kiwarp fuzzer, the
#                   hostile-peer mutations and the fault tests (hours;
#                   Documentation/security.md section 4)
#   make install    module (to /lib/modules/$(KVER)/extra) and libkiwarp
#                   (DESTDIR/PREFIX honoured)
#   make deb        Debian packages (Documentation/packaging.md)
#
# `make` builds for the running kernel (/lib/modules/$(uname -r)/build):
# install linux-headers-$(uname -r) first, or name another tree with
# KDIR=... The tests (make run/check/bench/fuzz) build for the kernels they
# boot in QEMU instead: Debian 12's default kernel here (VM_KDIR), the
# others through scripts/kernel.

KVER ?= $(shell uname -r)
KDIR ?= /lib/modules/$(KVER)/build
VM_KVER := $(shell dpkg-query -W -f='$${Depends}' linux-headers-amd64 2>/dev/null | \
		sed -n 's/.*linux-headers-\([0-9][^ ,]*-amd64\).*/\1/p')
VM_KDIR := /usr/src/linux-headers-$(VM_KVER)

PREFIX ?= /usr/local
VM_TIMEOUT ?= 3000

all: module lib tools

module:
	@test -f $(KDIR)/Makefile || { \
	  echo "kiwarp: no kernel build tree at $(KDIR)." >&2; \
	  if [ "$(KDIR)" = /lib/modules/$(KVER)/build ]; then \
	    echo "kiwarp: install the running kernel's headers (Debian: apt-get install linux-headers-$(KVER))," >&2; \
	    echo "kiwarp: or build for another kernel with make KDIR=/path/to/its/build/tree" >&2; fi; \
	  exit 1; }
	$(MAKE) -C $(KDIR) M=$(CURDIR) modules

lib:
	$(MAKE) -C lib

tools: lib
	$(MAKE) -C tools all bench-tools

tests: lib
	$(MAKE) -C selftests/unit
	$(MAKE) -C selftests/vm
	$(MAKE) -C selftests/vmfuzz
	$(MAKE) -C selftests/interop
	$(MAKE) -C examples

deps:
	scripts/deps

# What the VM tests need: the module for the VM's default kernel, the
# library, tools and test programs (VM_KDIR re-derived after deps).
vm-build:
	$(MAKE) module lib tools tests KDIR=$(VM_KDIR)

# Fresh machine: install what is needed, then build and boot.
run: deps
	$(MAKE) vm-build
	scripts/vm-run --accel tcg --timeout 900 -- tools/kiwarp-demo

check: deps
	$(MAKE) vm-build
	VM_TIMEOUT=$(VM_TIMEOUT) selftests/run_all.sh

# kiwarp vs plain TCP vs upstream siw, side by side in one VM boot
bench: deps
	$(MAKE) vm-build
	tools/kiwarp-bench
	tools/ooo-bench

fuzz: deps
	$(MAKE) vm-build
	scripts/fuzz-campaign

# Debian packages (kiwarp-dkms, libkiwarp1, libkiwarp-dev, kiwarp-tools)
deb:
	scripts/make-deb

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
	$(MAKE) -C examples clean
	$(MAKE) -C selftests/unit clean
	$(MAKE) -C selftests/vm clean
	$(MAKE) -C selftests/vmfuzz clean
	$(MAKE) -C selftests/interop clean

.PHONY: fuzz all module lib tools tests deps vm-build run check bench deb install clean
