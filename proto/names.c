/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "spw-proto.h"

int spw_proto_session_name_valid(const char *name)
{
	size_t n;

	if (!name)
		return 0;
	n = strlen(name);
	if (n == 0 || n > SPW_PROTO_MAX_SESSION_NAME)
		return 0;
	if (name[0] == '/' || name[0] == '.')
		return 0;
	if (strstr(name, ".."))
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-' || c == '/'))
			return 0;
	}
	return 1;
}

int spw_proto_tensor_name_valid(const char *name)
{
	size_t n;

	if (!name)
		return 0;
	n = strlen(name);
	if (n == 0 || n > SPW_PROTO_MAX_TENSOR_NAME)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] > 0x7e)
			return 0;
	return 1;
}

int spw_proto_page_size_valid(uint64_t page_size)
{
	return page_size >= SPW_PAGE_SIZE_MIN && page_size <= SPW_PAGE_SIZE_MAX &&
	       (page_size & (page_size - 1)) == 0;
}
