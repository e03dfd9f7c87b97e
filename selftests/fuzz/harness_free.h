/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* gen_corpus uses the unit-test fixtures without the test harness. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
