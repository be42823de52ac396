/* SPDX-License-Identifier: MIT */
/*
 * ctl-top.h: spillwayctl top (ctl-top.c), a live view of the status
 * socket. spillwayctl's main() hands the whole command line over when
 * ctl_top_wanted() says the command is "top".
 */
#ifndef SPW_CTL_TOP_H
#define SPW_CTL_TOP_H

#include <stdbool.h>

/* True when the first argument that is not an option (or an option's
 * value) is "top". */
bool ctl_top_wanted(int argc, char **argv);
/* Runs top; returns the exit status (0, 1 on errors, 2 on usage, 128+N
 * after signal N). */
int ctl_top_main(int argc, char **argv);

#endif
