/* SPDX-License-Identifier: MIT */
/*
 * tests/harness.h: a real spillwayd on a temporary directory, for the
 * integration tests. The tests' names for util/localdaemon.h, which the
 * benchmarks share (see there for what each call returns).
 *
 *   struct spw_test_daemon d;
 *   ASSERT_OK(spw_test_daemon_start(&d, NULL));       // default test config
 *   ... connect to d.control ...
 *   ASSERT_EQ(spw_test_daemon_stop(&d), 0);           // SIGTERM, exit status 0
 *
 * The binary comes from $SPILLWAYD (set by meson). Its stderr is the test's.
 */
#ifndef SPW_TEST_HARNESS_H
#define SPW_TEST_HARNESS_H

#include "util/localdaemon.h"

#define spw_test_daemon              local_daemon
#define spw_test_default_config      local_daemon_default_config
#define spw_test_daemon_start        local_daemon_start
#define spw_test_daemon_run_to_exit  local_daemon_run_to_exit
#define spw_test_daemon_stop         local_daemon_stop
#define spw_test_daemon_kill         local_daemon_kill
#define spw_test_daemon_cleanup      local_daemon_cleanup
#define spw_test_connect             unix_connect

#endif
