/* SPDX-License-Identifier: MIT */
/*
 * client/device.c: choosing a device backend at run time, and finding the
 * cuda backend's plugin (device.h says why it is one).
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spillway/version.h>

#include "device.h"

static void put_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void put_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/*
 * The plugin, once loaded, for the life of the process: it is never
 * dlclose()d, because libcudart cannot be unloaded safely while the
 * trainer (or a host function still queued on a stream) may use it. A
 * failed load is not remembered, so the next open tries again and says
 * why again.
 */
static pthread_mutex_t plugin_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct spw__cuda_plugin *plugin;

#if SPW_HAVE_CUDA
#define NO_PLUGIN_HINT "install libspillway-cuda.so beside libspillway.so or set SPILLWAY_CUDA_PLUGIN to its path"
#else
#define NO_PLUGIN_HINT "this spillway was built without CUDA (rebuild with meson -Dcuda=enabled), or set SPILLWAY_CUDA_PLUGIN to a plugin's path"
#endif

/* Where the plugin should be: $SPILLWAY_CUDA_PLUGIN, else the directory
 * libspillway.so was loaded from (the build tree keeps both in client/,
 * the install in libdir). */
static int plugin_path(char *buf, size_t len)
{
	const char *env = getenv("SPILLWAY_CUDA_PLUGIN");
	const char *slash;
	Dl_info info;
	int n;

	if (env && *env)
		n = snprintf(buf, len, "%s", env);
	else if (dladdr((void *)spw__device_open, &info) && info.dli_fname &&
		 (slash = strrchr(info.dli_fname, '/')))
		n = snprintf(buf, len, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname,
			     SPW__CUDA_PLUGIN_FILE);
	else
		n = snprintf(buf, len, "%s", SPW__CUDA_PLUGIN_FILE);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/*
 * Loads the plugin. Returns 0; -ENOENT when it cannot be loaded (missing,
 * or a library it needs is: no CUDA here, which automatic choice takes
 * quietly); or -ENODEV when a file was found but is no plugin of this
 * library (a broken install, never taken quietly). why names the path
 * tried, the loader's words and the fix.
 */
static int plugin_load(const struct spw__cuda_plugin **ret, char *why, size_t whylen)
{
	char path[PATH_MAX];
	const struct spw__cuda_plugin *p;
	spw__cuda_plugin_fn entry;
	const char *e;
	void *h;
	int r = 0;

	pthread_mutex_lock(&plugin_lock);
	if (plugin)
		goto out;
	if (plugin_path(path, sizeof(path)) < 0) {
		put_err(why, whylen, "the cuda plugin's path is too long; " NO_PLUGIN_HINT);
		r = -ENOENT;
		goto out;
	}
	/* RTLD_NOW: a missing symbol fails here, with its name, not later in
	 * a copy. RTLD_LOCAL: libcudart's symbols stay out of the global
	 * namespace the trainer's own CUDA libraries resolve against. */
	dlerror();
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		e = dlerror();
		put_err(why, whylen, "cannot load the cuda plugin %s (%s); " NO_PLUGIN_HINT, path,
			e ? e : "unknown loader error");
		r = -ENOENT;
		goto out;
	}
	entry = (spw__cuda_plugin_fn)dlsym(h, SPW__CUDA_PLUGIN_ENTRY);
	if (!entry) {
		e = dlerror();
		put_err(why, whylen, "%s is not a spillway cuda plugin (%s); point SPILLWAY_CUDA_PLUGIN "
			"at the libspillway-cuda.so built with this libspillway %s", path,
			e ? e : "no " SPW__CUDA_PLUGIN_ENTRY, SPW_VERSION_STRING);
		goto refuse;
	}
	p = entry(SPW__DEVICE_ABI);
	if (!p || p->abi != SPW__DEVICE_ABI || p->device_size != sizeof(struct spw__device) ||
	    p->ops_size != sizeof(struct spw__device_ops) || !p->probe || !p->open) {
		put_err(why, whylen, "the cuda plugin %s (spillway %s, device ABI %u) does not match this "
			"libspillway %s (device ABI %u); install the libspillway-cuda.so built with it",
			path, p && p->version ? p->version : "of another version", p ? p->abi : 0u,
			SPW_VERSION_STRING, SPW__DEVICE_ABI);
		goto refuse;
	}
	plugin = p;
	goto out;

refuse:
	dlclose(h);
	r = -ENODEV;
out:
	if (r == 0)
		*ret = plugin;
	pthread_mutex_unlock(&plugin_lock);
	return r;
}

int spw__device_cuda_count(char *why, size_t whylen)
{
	const struct spw__cuda_plugin *p;
	int n;

	if (plugin_load(&p, why, whylen) < 0)
		return 0;
	n = p->probe(why, whylen);
	return n > 0 ? n : 0;
}

/* Parses "cuda" (-1: the caller's current device) or "cuda:N". */
static int parse_cuda(const char *name, int *ordinal)
{
	const char *p;
	char *end;
	long v;

	if (strncmp(name, "cuda", 4) != 0)
		return -EINVAL;
	p = name + 4;
	if (*p == '\0') {
		*ordinal = -1;
		return 0;
	}
	if (*p != ':' || p[1] < '0' || p[1] > '9')
		return -EINVAL;
	errno = 0;
	v = strtol(p + 1, &end, 10);
	if (errno || *end != '\0' || v > INT_MAX)
		return -EINVAL;
	*ordinal = (int)v;
	return 0;
}

/* what names where the choice came from; hint says how to get the host
 * backend instead, which differs for an explicit name and the variable. */
static int open_cuda(const struct spw__cuda_plugin *p, const char *what, const char *hint,
		     int ordinal, struct spw__device **ret, char *err, size_t errlen)
{
	char why[512];
	int n, r;

	if (!p && plugin_load(&p, why, sizeof(why)) < 0) {
		put_err(err, errlen, "%s: %s; %s", what, why, hint);
		return -ENODEV;
	}
	n = p->probe(why, sizeof(why));
	if (n <= 0) {
		put_err(err, errlen, "%s: no CUDA device (%s); %s", what, why, hint);
		return -ENODEV;
	}
	if (ordinal >= n) {
		put_err(err, errlen, "%s: CUDA device %d does not exist (this host has %d); "
			"name one from 0 to %d", what, ordinal, n, n - 1);
		return -ENODEV;
	}
	r = p->open(ordinal, ret, why, sizeof(why));
	if (r < 0)
		put_err(err, errlen, "%s: %s", what, why);
	return r;
}

int spw__device_open(const char *name, struct spw__device **ret, char *err, size_t errlen)
{
	const struct spw__cuda_plugin *p;
	char what[96], why[512];
	const char *hint = "unset it to use the host backend";
	int ordinal, r;

	if (!ret)
		return -EINVAL;
	if (name) {
		snprintf(what, sizeof(what), "device \"%.64s\"", name);
		hint = "ask for \"host\" to use the host backend";
	} else {
		name = getenv("SPILLWAY_DEVICE");
		if (name && *name)
			snprintf(what, sizeof(what), "SPILLWAY_DEVICE=%.64s", name);
		else
			name = NULL;
	}

	if (!name) {
		/* Automatic: cuda when it can be used, quietly host when there
		 * is no plugin, no CUDA runtime or no GPU. A plugin that is
		 * there but wrong, or a present GPU that then fails to open,
		 * is an error, because silently training through the host
		 * backend would hide it. */
		r = plugin_load(&p, why, sizeof(why));
		if (r == -ENOENT || (r == 0 && p->probe(NULL, 0) <= 0))
			return spw__device_host_open(ret, err, errlen);
		if (r < 0) {
			put_err(err, errlen, "automatic device choice: %s; or set SPILLWAY_DEVICE=host "
				"to use the host backend", why);
			return r;
		}
		return open_cuda(p, "automatic device choice (cuda)",
				 "set SPILLWAY_DEVICE=host to use the host backend", -1, ret, err, errlen);
	}
	if (strcmp(name, "host") == 0)
		return spw__device_host_open(ret, err, errlen);
	if (parse_cuda(name, &ordinal) == 0)
		return open_cuda(NULL, what, hint, ordinal, ret, err, errlen);
	put_err(err, errlen, "%s: unknown device backend; use cuda, cuda:N or host "
		"(or unset SPILLWAY_DEVICE to choose automatically)", what);
	return -EINVAL;
}

struct spw__device *spw__device_close(struct spw__device *dev)
{
	if (dev)
		dev->ops->close(dev);
	return NULL;
}
