/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * libkiwarp internals. Not installed; the symbols declared here have hidden
 * visibility and are not in libkiwarp.map. test_ring.c links against the
 * static archive to reach them.
 */
#ifndef KW_INTERNAL_H
#define KW_INTERNAL_H

#include "kiwarp.h"

#define KW_EXPORT	__attribute__((visibility("default")))
#define KW_HIDDEN	__attribute__((visibility("hidden")))

/* kw_qp.flags / kw_cq.flags (library private) */
#define KW_F_FAKE	(1U << 0)	/* test ring: no ioctl, no munmap */

/*
 * Test-only constructors: point a QP/CQ at caller-provided memory laid out
 * like the kernel's mapping (a __u32 prod, a __u32 cons and a ring). With
 * KW_F_FAKE set the doorbell is only counted in qp->doorbells.
 */
KW_HIDDEN void kw__test_init_cq(struct kw_cq *cq, uint32_t *prod,
				uint32_t *cons, struct kiwarp_cqe *ring,
				uint32_t entries);
KW_HIDDEN void kw__test_init_qp(struct kw_qp *qp, uint32_t max_sge,
				uint32_t *sq_prod, uint32_t *sq_cons,
				struct kiwarp_wqe *sq, uint32_t sq_entries,
				uint32_t *rq_prod, uint32_t *rq_cons,
				struct kiwarp_wqe *rq, uint32_t rq_entries);
/* Validate kernel-reported ring geometry (also unit tested). */
KW_HIDDEN int kw__ring_geometry_ok(uint32_t entries, uint32_t prod_off,
				   uint32_t cons_off, uint32_t ring_off,
				   uint64_t map_size, size_t entry_size);

#endif
