/* SPDX-License-Identifier: MIT */
/*
 * tests/device/device-contract.h: the checks every device backend must
 * pass (client/device.h's contract), run by test-device-host and
 * test-device-cuda against their backend.
 */
#ifndef SPW_TEST_DEVICE_CONTRACT_H
#define SPW_TEST_DEVICE_CONTRACT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "device.h"

/* Opens a fresh device of the backend under test; aborts on failure. */
typedef struct spw__device *(*contract_open_fn)(void);

/* Runs every contract check; aborts on the first failure. */
void device_contract_run(contract_open_fn open_dev);

/*
 * A gate: a host function that blocks its stream until the test opens it,
 * so a test can hold work back on both backends alike (a blocked host
 * function blocks a CUDA stream too).
 */
struct gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool open;
	atomic_int entered;
};

void gate_init(struct gate *g);
void gate_fini(struct gate *g);
void gate_fn(void *arg);                 /* the host function: waits for the gate */
void gate_open(struct gate *g);
/* Opens the gate from another thread after ms milliseconds. */
pthread_t gate_open_later(struct gate *g, int ms);

/* Page-aligned host memory, registered with dev; and its undoing. */
void *contract_host_alloc(struct spw__device *dev, size_t n);
void contract_host_free(struct spw__device *dev, void *p);

void sleep_ms(int ms);

#endif
