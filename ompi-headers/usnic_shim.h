/*
 * The C shim's side of the boundary: helpers the Rust edge calls for everything Open MPI offers
 * only as macros or static inline functions (modex, convertor, proc flags, active-message table,
 * output). Implemented in mca_btl_usnic.c.shim; bindgen generates the Rust declarations from here.
 */
#ifndef USNIC_SHIM_H
#define USNIC_SHIM_H

#include "opal_config.h"

/* The structs and callbacks the shim and the Rust edge share are Open MPI 4.1's (BTL 3.1):
 * 4.0's differ in places that still compile, 5.0's do not compile. Say so first. */
#if OPAL_MAJOR_VERSION != 4 || OPAL_MINOR_VERSION != 1
#error "usnic-rs is built for Open MPI 4.1 (BTL framework 3.1); these headers are another version"
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "opal/constants.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/mca/btl/btl.h"
#include "opal/util/proc.h"

/* The module Open MPI sees: the BTL 3.1 module first, then the index of the Rust module behind it. */
typedef struct usnic_shim_module_t {
    mca_btl_base_module_t super;
    uint32_t index;
} usnic_shim_module_t;

/* Publish this process's usnic modex blob (key from the component version). */
int usnic_shim_modex_send(const void *data, size_t size);
/* Fetch a peer's blob; on success *data is malloc'ed (release with usnic_shim_free). */
int usnic_shim_modex_recv(const opal_proc_t *proc, void **data, size_t *size);
void usnic_shim_free(void *ptr);

/* 1 when OPAL_PROC_ON_LOCAL_NODE(proc->proc_flags). */
int usnic_shim_proc_on_local_node(const opal_proc_t *proc);
/* Name (jobid, vpid) of a proc, and of this process. */
void usnic_shim_proc_name(const opal_proc_t *proc, uint32_t *jobid, uint32_t *vpid);
void usnic_shim_my_name(uint32_t *jobid, uint32_t *vpid);
/* Host name of a proc as Open MPI knows it ("unknown" when it does not). */
const char *usnic_shim_proc_hostname(const opal_proc_t *proc);
const char *usnic_shim_my_hostname(void);

/* Hand a received fragment to the callback registered for its tag; 0 when one ran, -1 when none. */
int usnic_shim_am_deliver(mca_btl_base_module_t *btl, uint8_t tag, mca_btl_base_descriptor_t *des);

/* 1 when the convertor's data must be packed (not one contiguous block in user memory). */
int usnic_shim_convertor_need_buffers(const opal_convertor_t *conv);
/* Advance the convertor by up to *size bytes. *data NULL (only when no buffers are needed):
 * *data becomes the address of those bytes in user memory; else they are packed at *data.
 * *size becomes the number of bytes. Returns 0 or an OPAL error. */
int usnic_shim_convertor_pack(opal_convertor_t *conv, void **data, size_t *size);

/* One line on Open MPI's output: level 0 always, else through btl_base_verbose. */
void usnic_shim_output(int level, const char *msg);
/* Current btl_base_verbose level (framework verbosity). */
int usnic_shim_verbose_level(void);
/* Print a topic of help-mpi-btl-usnic-rs.txt with printf-style arguments, framed as opal_show_help
 * frames it, once per process (the same text again prints nothing). Returns OPAL_ERR_NOT_FOUND,
 * printing nothing, when that file is neither next to the loaded plugin nor in Open MPI's data
 * directory (the caller then prints its fallback). */
int usnic_shim_show_help(const char *topic, ...);

#endif
