/*
 * What bindgen sees of Open MPI: the installed 4.1 headers that define the structures the Rust
 * edge reads or embeds (descriptor, segment, proc), the return codes and flags, plus the shim's
 * own helper prototypes. Nothing here is a copy of an Open MPI definition.
 */
#ifndef USNIC_RS_OMPI_H
#define USNIC_RS_OMPI_H

#include "usnic_shim.h"

#endif
