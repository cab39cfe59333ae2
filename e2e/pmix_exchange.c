/* pmix_exchange: one PMIx client per rank of `srun --mpi=pmix` (e2e/test_pmix.py). What an MPI
 * library does at MPI_Init, without MPI: PMIx_Init with the slurmstepd's PMIx server, the job's size,
 * a value of its own put and committed, a fence that collects every rank's values across the nodes
 * (the modex), and each other rank's value read back. Prints one line:
 *   rank=R size=N nspace=NS node=HOST peers=P0,P1,...
 * (peers: the value each rank put, "host:rank", in rank order). Exit status non-zero at the first
 * failing call, naming it and PMIx's error string. Built on the lab host against libpmix-dev (the same
 * Debian 12 libpmix2 as the 22.05 slurmd image's) and run inside the slurmd pods. */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        pmix_status_t rc_ = (call);                                                        \
        if (rc_ != PMIX_SUCCESS) {                                                         \
            fprintf(stderr, "pmix_exchange: %s: %s\n", #call, PMIx_Error_string(rc_));     \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

int main(void) {
    pmix_proc_t me, job, peer;
    pmix_value_t value, *got = NULL;
    pmix_info_t collect;
    char host[256], mine[300], peers[4096] = "";
    bool yes = true;
    uint32_t size, r;

    CHECK(PMIx_Init(&me, NULL, 0));
    PMIX_PROC_CONSTRUCT(&job);
    PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
    CHECK(PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &got));
    size = got->data.uint32;
    PMIX_VALUE_RELEASE(got);

    gethostname(host, sizeof host);
    snprintf(mine, sizeof mine, "%s:%u", getenv("SLURMD_NODENAME") ? getenv("SLURMD_NODENAME") : host, me.rank);
    PMIX_VALUE_CONSTRUCT(&value);
    value.type = PMIX_STRING;
    value.data.string = mine;
    CHECK(PMIx_Put(PMIX_GLOBAL, "slurmpool.e2e", &value));
    CHECK(PMIx_Commit());
    PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    CHECK(PMIx_Fence(&job, 1, &collect, 1));

    for (r = 0; r < size; r++) {
        PMIX_LOAD_PROCID(&peer, me.nspace, r);
        CHECK(PMIx_Get(&peer, "slurmpool.e2e", NULL, 0, &got));
        if (got->type != PMIX_STRING) {
            fprintf(stderr, "pmix_exchange: rank %u's value is not a string\n", r);
            return 1;
        }
        if (r) strncat(peers, ",", sizeof peers - strlen(peers) - 1);
        strncat(peers, got->data.string, sizeof peers - strlen(peers) - 1);
        PMIX_VALUE_RELEASE(got);
    }
    printf("rank=%u size=%u nspace=%s node=%s peers=%s\n", me.rank, size, me.nspace,
           getenv("SLURMD_NODENAME") ? getenv("SLURMD_NODENAME") : host, peers);
    fflush(stdout);
    CHECK(PMIx_Finalize(NULL, 0));
    return 0;
}
