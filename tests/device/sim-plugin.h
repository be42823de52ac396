/* SPDX-License-Identifier: MIT */
/*
 * sim-plugin.h: what a test needs to hand tests/device/sim-plugin.c's
 * device host memory: the address the device would know it by.
 */
#ifndef SPW_SIM_PLUGIN_H
#define SPW_SIM_PLUGIN_H

#include <stdint.h>

/* Bit 62: no x86-64 or arm64 user address has it, so a load through a
 * tagged pointer faults. */
#define SIM_TAG ((uintptr_t)1 << 62)

static inline void *sim_device_ptr(void *host)
{
	return (void *)((uintptr_t)host + SIM_TAG);
}

#endif
