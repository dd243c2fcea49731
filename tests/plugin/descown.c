/* The descriptor contract of opal/mca/btl/btl.h, driven straight into the usnic BTL (found
 * through ob1's BML) inside a 2-rank ob1 job. Rank 0 sends to rank 1 on tag MCA_BTL_TAG_USR,
 * which no layer of Open MPI uses; rank 1 records what arrives.
 *
 * 1. BTL-owned, no SEND_ALWAYS_CALLBACK: btl_send returns 1 (complete, no callback ever) or 0
 *    (exactly one callback later).
 * 2. BTL-owned with SEND_ALWAYS_CALLBACK: returns 0 and calls back exactly once.
 * 3. PML-owned (no MCA_BTL_DES_FLAGS_BTL_OWNERSHIP): exactly one callback; the descriptor is
 *    the PML's until it calls btl_free, so its segment is still its own after the callback:
 *    the bytes it wrote are still there, and it may write new ones and send it again (ob1's
 *    CUDA path re-sends a descriptor it kept; ob1 4.1.4 built without CUDA never sends one
 *    without BTL_OWNERSHIP). Meanwhile a new descriptor must not be given its memory. Rank 1
 *    must receive both messages whole. The same with the user's data read in place
 *    (prepare_src of 32 KiB contiguous).
 * 4. A prepare_src'd descriptor freed unsent is accepted once, a second free refused.
 *
 * Prints "descown: N errors" on each rank and exits non-zero on errors. Build with
 * mpicc -I<include>/openmpi (Open MPI's devel headers) ... -lopen-pal. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ompi_config.h"
#include "ompi/communicator/communicator.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/mca/bml/base/base.h"
#include "ompi/mca/bml/bml.h"
#include "ompi/proc/proc.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/mca/btl/btl.h"
#include "opal/runtime/opal_progress.h"

#define TAG MCA_BTL_TAG_USR
#define LEN 64
#define HDR 16
#define BIG 32768 /* read in place by the BTL (at least btl_usnic_pack_lazy_threshold) */
#define MAXMSG 16

static int errors;
static int ncb[8];
static int cb_status[8];
static unsigned char big[BIG];

static struct {
    size_t len;
    size_t same; /* bytes equal to the first one */
    unsigned char first;
} got[MAXMSG];
static int ngot;

static void on_recv(mca_btl_base_module_t *btl, mca_btl_base_tag_t tag,
                    mca_btl_base_descriptor_t *des, void *cbdata)
{
    (void) btl;
    (void) tag;
    (void) cbdata;
    if (ngot >= MAXMSG) {
        return;
    }
    size_t len = 0;
    for (size_t i = 0; i < des->des_segment_count; i++) {
        len += des->des_segments[i].seg_len;
    }
    got[ngot].len = len;
    got[ngot].same = 0;
    got[ngot].first = 0;
    for (size_t i = 0; i < des->des_segment_count; i++) {
        /* The test's messages are one repeated byte. */
        const unsigned char *p = des->des_segments[i].seg_addr.pval;
        for (size_t j = 0; j < des->des_segments[i].seg_len; j++) {
            if (0 == got[ngot].same && 0 == got[ngot].first) {
                got[ngot].first = p[j];
            }
            got[ngot].same += p[j] == got[ngot].first;
        }
    }
    ngot++;
}

static void on_sent(mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                    mca_btl_base_descriptor_t *des, int status)
{
    (void) btl;
    (void) ep;
    int which = (int) (intptr_t) des->des_cbdata;
    ncb[which]++;
    cb_status[which] = status;
}

static void wait_for(int *counter, int want, const char *what)
{
    double t = MPI_Wtime();
    while (*counter < want) {
        opal_progress();
        if (MPI_Wtime() - t > 10) {
            fprintf(stderr, "descown: timed out waiting for %s (%d of %d)\n", what, *counter,
                    want);
            errors++;
            return;
        }
    }
}

static void check(int ok, const char *msg)
{
    if (!ok) {
        fprintf(stderr, "descown: %s\n", msg);
        errors++;
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        fprintf(stderr, "descown: run with 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    ompi_proc_t *peer = ompi_comm_peer_lookup(&ompi_mpi_comm_world.comm, 1 - rank);
    mca_bml_base_endpoint_t *bep = mca_bml_base_get_endpoint(peer);
    mca_bml_base_btl_t *bb = NULL;
    for (size_t i = 0; bep && i < mca_bml_base_btl_array_get_size(&bep->btl_eager); i++) {
        mca_bml_base_btl_t *b = mca_bml_base_btl_array_get_index(&bep->btl_eager, i);
        if (0 == strcmp(b->btl->btl_component->btl_version.mca_component_name, "usnic")) {
            bb = b;
        }
    }
    if (NULL == bb) {
        fprintf(stderr, "descown: no usnic BTL to the peer\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    mca_btl_base_module_t *btl = bb->btl;
    struct mca_btl_base_endpoint_t *ep = bb->btl_endpoint;
    mca_btl_base_active_message_trigger[TAG].cbfunc = on_recv;
    mca_btl_base_active_message_trigger[TAG].cbdata = NULL;
    MPI_Barrier(MPI_COMM_WORLD);

    int expect = 0;
    if (0 == rank) {
        uint32_t prio = MCA_BTL_DES_FLAGS_PRIORITY;
        uint32_t own = MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;
        uint32_t always = MCA_BTL_DES_SEND_ALWAYS_CALLBACK;

        /* 1: BTL-owned, no ALWAYS_CALLBACK. */
        mca_btl_base_descriptor_t *d = btl->btl_alloc(btl, ep, MCA_BTL_NO_ORDER, LEN, prio | own);
        memset(d->des_segments[0].seg_addr.pval, 'a', LEN);
        d->des_cbfunc = on_sent;
        d->des_cbdata = (void *) 1;
        int rc = btl->btl_send(btl, ep, d, TAG);
        int rc1 = rc;
        check(rc == 0 || rc == 1, "owned send: return code not 0 or 1");
        if (rc == 0) {
            wait_for(&ncb[1], 1, "owned send's callback");
        }
        expect++;

        /* 2: BTL-owned with ALWAYS_CALLBACK. */
        d = btl->btl_alloc(btl, ep, MCA_BTL_NO_ORDER, LEN, prio | own | always);
        memset(d->des_segments[0].seg_addr.pval, 'b', LEN);
        d->des_cbfunc = on_sent;
        d->des_cbdata = (void *) 2;
        rc = btl->btl_send(btl, ep, d, TAG);
        check(rc == 0, "owned ALWAYS_CALLBACK send: did not return 0");
        wait_for(&ncb[2], 1, "owned ALWAYS_CALLBACK send's callback");
        expect++;

        /* 3: PML-owned: sent, called back, refilled, sent again, then freed by us. */
        d = btl->btl_alloc(btl, ep, MCA_BTL_NO_ORDER, LEN, prio);
        unsigned char *seg = d->des_segments[0].seg_addr.pval;
        memset(seg, 'c', LEN);
        d->des_cbfunc = on_sent;
        d->des_cbdata = (void *) 3;
        rc = btl->btl_send(btl, ep, d, TAG);
        check(rc == 0 || rc == 1, "PML-owned send: return code not 0 or 1");
        wait_for(&ncb[3], 1, "PML-owned send's callback");
        expect++;
        check(d->des_segments[0].seg_addr.pval == seg && d->des_segments[0].seg_len == LEN,
              "PML-owned descriptor: segment changed after its callback");
        int kept = 0;
        for (int i = 0; i < LEN; i++) {
            kept += seg[i] == 'c';
        }
        if (kept != LEN) {
            fprintf(stderr, "descown: PML-owned descriptor: %d of %d bytes of its segment "
                            "changed after its callback\n", LEN - kept, LEN);
            errors++;
        }
        /* Another descriptor now must not get memory the PML-owned one still holds. */
        mca_btl_base_descriptor_t *other = btl->btl_alloc(btl, ep, MCA_BTL_NO_ORDER, LEN,
                                                          prio | own);
        unsigned char *oseg = other->des_segments[0].seg_addr.pval;
        if (oseg < seg + LEN && seg < oseg + LEN) {
            fprintf(stderr, "descown: a new descriptor's segment %p overlaps the live "
                            "PML-owned descriptor's %p\n", (void *) oseg, (void *) seg);
            errors++;
        }
        check(OPAL_SUCCESS == btl->btl_free(btl, other), "btl_free of an unsent descriptor");
        memset(seg, 'd', LEN);
        d->des_cbdata = (void *) 4;
        rc = btl->btl_send(btl, ep, d, TAG);
        check(rc == 0 || rc == 1, "PML-owned re-send: return code not 0 or 1");
        wait_for(&ncb[4], 1, "PML-owned re-send's callback");
        expect++;
        check(OPAL_SUCCESS == btl->btl_free(btl, d), "btl_free of the PML-owned descriptor");

        /* 3b: PML-owned, the user's contiguous data read in place (prepare_src), sent twice. */
        opal_convertor_t conv;
        OBJ_CONSTRUCT(&conv, opal_convertor_t);
        memset(big, 'e', BIG);
        opal_convertor_copy_and_prepare_for_send(peer->super.proc_convertor,
                                                 &ompi_mpi_byte.dt.super, BIG, big, 0, &conv);
        size_t sz = BIG;
        d = btl->btl_prepare_src(btl, ep, &conv, MCA_BTL_NO_ORDER, HDR, &sz, prio);
        check(NULL != d && BIG == sz, "prepare_src of contiguous data");
        memset(d->des_segments[0].seg_addr.pval, 'e', HDR);
        d->des_cbfunc = on_sent;
        d->des_cbdata = (void *) 5;
        rc = btl->btl_send(btl, ep, d, TAG);
        check(rc == 0 || rc == 1, "PML-owned in-place send: return code not 0 or 1");
        wait_for(&ncb[5], 1, "PML-owned in-place send's callback");
        expect++;
        memset(big, 'f', BIG);
        memset(d->des_segments[0].seg_addr.pval, 'f', HDR);
        d->des_cbdata = (void *) 6;
        rc = btl->btl_send(btl, ep, d, TAG);
        check(rc == 0 || rc == 1, "PML-owned in-place re-send: return code not 0 or 1");
        wait_for(&ncb[6], 1, "PML-owned in-place re-send's callback");
        expect++;
        check(OPAL_SUCCESS == btl->btl_free(btl, d), "btl_free of the in-place descriptor");

        /* 4: prepare_src'd, then freed unsent (ob1 does when the convertor packs nothing). */
        opal_convertor_cleanup(&conv);
        opal_convertor_copy_and_prepare_for_send(peer->super.proc_convertor,
                                                 &ompi_mpi_byte.dt.super, BIG, big, 0, &conv);
        sz = BIG;
        d = btl->btl_prepare_src(btl, ep, &conv, MCA_BTL_NO_ORDER, HDR, &sz,
                                 prio | own | always);
        check(NULL != d, "prepare_src");
        check(OPAL_SUCCESS == btl->btl_free(btl, d), "btl_free of an unsent prepared descriptor");
        check(OPAL_SUCCESS != btl->btl_free(btl, d), "a second btl_free was accepted");
        OBJ_DESTRUCT(&conv);

        /* Give late callbacks a chance to show (one more would be an error). */
        double t = MPI_Wtime();
        while (MPI_Wtime() - t < 0.3) {
            opal_progress();
        }
        check(ncb[1] == (rc1 == 1 ? 0 : 1),
              "owned send: called back after returning 1, or not exactly once after 0");
        check(ncb[2] == 1, "owned ALWAYS_CALLBACK send: not called back exactly once");
        check(ncb[3] == 1, "PML-owned send: not called back exactly once");
        check(ncb[4] == 1, "PML-owned re-send: not called back exactly once");
        check(ncb[5] == 1 && ncb[6] == 1, "PML-owned in-place sends: not called back once each");
        for (int i = 1; i <= 6; i++) {
            check(cb_status[i] == OPAL_SUCCESS, "a callback reported an error");
        }
        MPI_Send(&expect, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
    } else {
        MPI_Recv(&expect, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        wait_for(&ngot, expect, "messages");
        const char want[] = "abcdef";
        const size_t want_len[] = {LEN, LEN, LEN, LEN, HDR + BIG, HDR + BIG};
        for (int i = 0; i < ngot && i < expect; i++) {
            if (got[i].len != want_len[i] || got[i].first != want[i]
                || got[i].same != got[i].len) {
                fprintf(stderr, "descown: message %d: %zu bytes, %zu of them '%c', want %zu of "
                                "'%c'\n", i, got[i].len, got[i].same,
                        got[i].first ? got[i].first : '-', want_len[i], want[i]);
                errors++;
            }
        }
        check(ngot == expect, "rank 1 received more messages than were sent");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    mca_btl_base_active_message_trigger[TAG].cbfunc = NULL;
    printf("descown: rank %d: %d errors\n", rank, errors);
    MPI_Finalize();
    return errors ? 1 : 0;
}
