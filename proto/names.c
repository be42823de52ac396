/* SPDX-License-Identifier: MIT */
#include "spw-proto.h"
#include "util/names.h"

/* Both follow util/names.h's one rule; a tensor's name may add its role
 * after a space. */
int spw_proto_session_name_valid(const char *name)
{
	return name_valid(name, SPW_PROTO_MAX_SESSION_NAME);
}

int spw_proto_tensor_name_valid(const char *name)
{
	return name_list_valid(name, SPW_PROTO_MAX_TENSOR_NAME);
}

int spw_proto_page_size_valid(uint64_t page_size)
{
	return page_size >= SPW_PAGE_SIZE_MIN && page_size <= SPW_PAGE_SIZE_MAX &&
	       (page_size & (page_size - 1)) == 0;
}
