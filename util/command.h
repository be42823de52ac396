/* SPDX-License-Identifier: MIT */
/*
 * util/command.h: run a shell command and keep what it prints, for tests
 * and benchmarks that drive a tool (spillwayctl, fio).
 */
#ifndef SPW_UTIL_COMMAND_H
#define SPW_UTIL_COMMAND_H

#include <stddef.h>

/* Runs cmd with /bin/sh (popen), reads its stdout into buf (up to len - 1
 * bytes, NUL-terminated; the rest is read and dropped so the command never
 * blocks on a full pipe) and waits for it. Returns its wait status as
 * waitpid() gives it (0 for a clean exit 0; see WIFEXITED), or a negative
 * errno when it could not be started. */
int command_output(const char *cmd, char *buf, size_t len);

#endif
