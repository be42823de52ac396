/* SPDX-License-Identifier: MIT */
/*
 * ctl-top.h: spillwayctl top (ctl-top.c), a live view of the status
 * socket. spillwayctl's main() reads the command line (one parser for
 * every command) and hands over what top needs.
 */
#ifndef SPW_CTL_TOP_H
#define SPW_CTL_TOP_H

/* Runs top on the status socket at path; iterations and sort are the
 * options' text as given (NULL: until q or a signal; by name). Returns the
 * exit status (0, 1 on errors, 2 for a bad option value, 128+N after
 * signal N). */
int ctl_top_main(const char *path, const char *iterations, const char *sort);

#endif
