/* comm: the collectives of the host backend, over MPI.
 *
 * One Comm per process. Under mpirun (or srun) it is MPI_COMM_WORLD; run
 * alone it is a world of one rank and every collective is a local copy, with
 * no MPI call at all. Collectives are issued non-blocking and polled against
 * a deadline (CommOptions.timeout_s, default 300 s): a rank that died or
 * hangs makes the others return COMM_ETIMEDOUT instead of waiting forever;
 * the caller then reports and calls comm_abort, which ends every rank.
 * Errors are returned as values; nothing here prints or exits. */
#ifndef ZINF_COMM_H
#define ZINF_COMM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum CommStatus {
    COMM_OK = 0,
    COMM_EMPI = -1,      /* MPI returned an error (message in comm_last_error) */
    COMM_ETIMEDOUT = -2, /* a collective did not complete by the deadline */
    COMM_EARG = -3,      /* bad arguments (sizes overflow MPI's int counts, ...) */
    COMM_ELAUNCH = -4,   /* started by a launcher that gave no MPI bootstrap (message says how to launch) */
} CommStatus;

/* How the job's ranks sit on nodes: the node count and the fewest and most
 * ranks any node holds (equal when every node has as many). */
typedef struct CommLayout {
    int nodes, min_per_node, max_per_node;
} CommLayout;

typedef struct Comm {
    int rank, size;
    int local_rank, local_size; /* within the node (MPI_COMM_TYPE_SHARED) */
    CommLayout layout;          /* the same on every rank */
    bool mpi;                   /* MPI initialised by us */
    double timeout_s;
    void *world;                /* MPI_Comm, opaque here */
    void *node;
    char err[256];
} Comm;

/* How comm_init joins; all zero (or a NULL pointer) for the defaults. The
 * programs take timeout_s and node_split from ZINF_COMM_TIMEOUT and
 * ZINF_TEST_NODE_SPLIT (docs/environment.md). */
typedef struct CommOptions {
    bool force_mpi;     /* MPI even without a launcher's environment */
    double timeout_s;   /* how long a collective may wait for a peer (0: 300 s) */
    int node_split;     /* tests only: pretend the ranks sit on this many nodes (0: as MPI groups them) */
} CommOptions;

/* Joins the job. Uses MPI when a launcher's environment is present
 * (OMPI_COMM_WORLD_SIZE from mpirun, PMIX_RANK from srun --mpi=pmix,
 * PMI_SIZE from a PMI-2 launcher, MPI_LOCALNRANKS from MPICH's) or
 * o->force_mpi is set; otherwise a world of one, except that several tasks
 * of one srun step with none of those (srun --mpi=none, the usual default)
 * are refused with COMM_ELAUNCH: each would train alone. The node of a rank
 * is its MPI_COMM_TYPE_SHARED group; for tests only, o->node_split = k
 * (at most the world's size) pretends the ranks sit on k nodes instead
 * (rank r on node r*k/size), since one machine cannot be made to look like
 * two to MPI. o may be NULL. */
CommStatus comm_init(Comm *c, int *argc, char ***argv, const CommOptions *o);
void comm_finalize(Comm *c);
/* Ends every rank of the job (MPI_Abort); returns only in a world of one. */
void comm_abort(Comm *c, int code);
const char *comm_last_error(const Comm *c);
/* Who started this process, from its environment: "srun (Slurm job 41, step
 * 0)", "mpirun in Slurm job 41", "mpirun", "a PMI launcher", "none". */
void comm_launcher_str(char *buf, size_t n);

/* The layout from every rank's (local rank, local size), pairs[2*r] and
 * pairs[2*r+1]: a node per local rank 0. False when they do not describe
 * nodes (a size below 1, no local rank 0). */
bool comm_layout_of(const int *pairs, int size, CommLayout *out);
/* "2 nodes x 8 ranks", "3 nodes x 4 to 6 ranks", "1 node x 1 rank". */
void comm_layout_str(const CommLayout *l, char *buf, size_t n);
/* Whether a job of this layout fits a plan for `nodes` nodes of `per_node`
 * GPUs holding `ranks` ranks (ranks <= nodes * per_node; the last node may be
 * partly used): the same node count and no node with more ranks than
 * per_node. 0 when it fits, else -1 and a message naming both layouts and
 * the mpirun and srun lines that fit. The rank count itself is the caller's
 * to check first. */
int comm_layout_check(const CommLayout *l, int nodes, int per_node, int ranks, char *err, size_t n);

CommStatus comm_barrier(Comm *c);
/* recv holds size * bytes: rank r's send lands at recv + r * bytes. */
CommStatus comm_allgather(Comm *c, const void *send, void *recv, size_t bytes);
/* send holds size * count floats; rank r receives the sum of every rank's
 * block r. Sums are taken in rank order (0, 1, ...) on every rank, so the
 * result does not depend on timing. */
CommStatus comm_reduce_scatter_f32(Comm *c, const float *send, float *recv, size_t count);
/* recv[i] = the sum of blocks[r * count + i] over r = 0 .. nranks-1, added
 * in rank order: the reduce-scatter's sum after its all-to-all, here and in
 * comm_wait (one order, so that both give the same bits). */
void comm_sum_blocks_f32(const float *blocks, int nranks, size_t count, float *recv);
CommStatus comm_allreduce_sum_f32(Comm *c, float *buf, size_t count);
CommStatus comm_allreduce_sum_f64(Comm *c, double *buf, size_t count);
CommStatus comm_allreduce_max_i64(Comm *c, int64_t *v);
/* Every rank learns whether any rank failed, so that all go on or leave
 * together and none waits alone in a later collective. rc is this rank's
 * result (0: it succeeded). Returns 0 when every rank's rc is 0, else 1 +
 * the highest rank whose rc is not; -1 when the agreement itself failed
 * (comm_last_error says why). */
int comm_agree(Comm *c, int rc);
CommStatus comm_bcast(Comm *c, void *buf, size_t bytes, int root);

#endif
