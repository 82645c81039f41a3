/* comm: the collectives of the host backend, over MPI.
 *
 * One Comm per process. Under mpirun (or srun) it is MPI_COMM_WORLD; run
 * alone it is a world of one rank and every collective is a local copy, with
 * no MPI call at all. Collectives are issued non-blocking and polled against
 * a deadline (ZINF_COMM_TIMEOUT seconds, default 300): a rank that died or
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
} CommStatus;

typedef struct Comm {
    int rank, size;
    int local_rank, local_size; /* within the node (MPI_COMM_TYPE_SHARED) */
    bool mpi;                   /* MPI initialised by us */
    double timeout_s;
    void *world;                /* MPI_Comm, opaque here */
    void *node;
    char err[256];
} Comm;

/* Joins the job. Uses MPI when a launcher's environment is present
 * (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK, SLURM_NTASKS with srun) or
 * force_mpi is set; otherwise a world of one. */
CommStatus comm_init(Comm *c, int *argc, char ***argv, bool force_mpi);
void comm_finalize(Comm *c);
/* Ends every rank of the job (MPI_Abort); returns only in a world of one. */
void comm_abort(Comm *c, int code);
const char *comm_last_error(const Comm *c);

CommStatus comm_barrier(Comm *c);
/* recv holds size * bytes: rank r's send lands at recv + r * bytes. */
CommStatus comm_allgather(Comm *c, const void *send, void *recv, size_t bytes);
/* send holds size * count floats; rank r receives the sum of every rank's
 * block r. Sums are taken in rank order (0, 1, ...) on every rank, so the
 * result does not depend on timing. */
CommStatus comm_reduce_scatter_f32(Comm *c, const float *send, float *recv, size_t count);
CommStatus comm_allreduce_sum_f32(Comm *c, float *buf, size_t count);
CommStatus comm_allreduce_sum_f64(Comm *c, double *buf, size_t count);
CommStatus comm_allreduce_max_i64(Comm *c, int64_t *v);
CommStatus comm_bcast(Comm *c, void *buf, size_t bytes, int root);

#endif
