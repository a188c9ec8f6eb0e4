// shim.h declares the thin C layer between package rdma and rdma-core.
//
// libibverbs.so.1 and librdmacm.so.1 are opened at run time with dlopen, so the
// binary starts on machines without rdma-core. Every exported rdma-core
// function is called through rd_fn; the data-path verbs (ibv_post_send,
// ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) are static inline in verbs.h
// and call the provider through ctx->ops, so they need no symbol at all.
//
// No Go pointer is ever passed to these functions: every buffer they read or
// write is allocated with malloc (or mmap) and owned by a Go object.
#ifndef ISER_ATTACH_RDMA_SHIM_H
#define ISER_ATTACH_RDMA_SHIM_H

#include <stdint.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

// rd_load opens both libraries and resolves every symbol. It returns 0, or
// -1 with a message in err (size errlen) naming the library or symbol.
int rd_load(const char *verbs_name, const char *cm_name, char *err, int errlen);

// rd_event is a copy of one rdma_cm_event, taken before it is acked.
struct rd_event {
	int type;
	int status;
	struct rdma_cm_id *id;
	struct rdma_cm_id *listen_id;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t private_data_len;
	uint8_t private_data[256];
};

// rd_send is one send work request as package rdma describes it; its SGEs
// are the nsge entries that follow the previous request's in the SGE array.
struct rd_send {
	uint64_t id;
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t nsge;
	uint32_t opcode; // enum ibv_wr_opcode
	uint32_t flags;  // enum ibv_send_flags
};

// rd_wc is the part of one ibv_wc that package rdma reports.
struct rd_wc {
	uint64_t id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t invalidated_rkey;
	uint32_t wc_flags;
	uint32_t vendor_err;
	uint32_t pad;
};

// rd_devattr holds the device limits package rdma uses; err is 0 or -errno.
struct rd_devattr {
	int err;
	int max_qp_rd_atom;
	int max_qp_init_rd_atom;
	int max_qp_wr;
	int max_sge;
	int max_cqe;
};

// rd_sockaddr is an IP address: family 4 or 6 (0 if unset), port in host order.
struct rd_sockaddr {
	int family;
	uint16_t port;
	uint8_t ip[16];
};

// Connection management. Functions returning int return 0 or -errno;
// functions returning a pointer return NULL with errno set.
struct rdma_event_channel *rd_create_channel(void);
void rd_destroy_channel(struct rdma_event_channel *ch);
struct rdma_cm_id *rd_create_id(struct rdma_event_channel *ch);
int rd_destroy_id(struct rdma_cm_id *id);
int rd_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *ch);
int rd_resolve_addr(struct rdma_cm_id *id, const uint8_t *src, int srclen, uint16_t srcport,
		    const uint8_t *dst, int dstlen, uint16_t dstport, int timeout_ms);
int rd_resolve_route(struct rdma_cm_id *id, int timeout_ms);
int rd_bind_listen(struct rdma_cm_id *id, const uint8_t *ip, int iplen, uint16_t port, int backlog);
int rd_get_event(struct rdma_event_channel *ch, struct rd_event *out);
int rd_connect(struct rdma_cm_id *id, const void *pd, int pdlen, int rr, int id_depth,
	       int retry, int rnr_retry);
int rd_accept(struct rdma_cm_id *id, const void *pd, int pdlen, int rr, int id_depth,
	      int rnr_retry);
int rd_reject(struct rdma_cm_id *id, const void *pd, int pdlen);
int rd_disconnect(struct rdma_cm_id *id);
// rd_addr returns the local (peer=0) or remote (peer=1) address.
struct rd_sockaddr rd_addr(struct rdma_cm_id *id, int peer);
const char *rd_device_name(struct rdma_cm_id *id);
struct rd_devattr rd_query_device(struct rdma_cm_id *id);

// Verbs resources, with the same conventions.
struct ibv_pd *rd_alloc_pd(struct rdma_cm_id *id);
int rd_dealloc_pd(struct ibv_pd *pd);
struct ibv_comp_channel *rd_create_comp_channel(struct rdma_cm_id *id);
int rd_destroy_comp_channel(struct ibv_comp_channel *ch);
struct ibv_cq *rd_create_cq(struct rdma_cm_id *id, int cqe, struct ibv_comp_channel *ch);
int rd_destroy_cq(struct ibv_cq *cq);
int rd_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
		 int send_wr, int recv_wr, int send_sge, int recv_sge);
void rd_destroy_qp(struct rdma_cm_id *id);
int rd_qp_to_error(struct rdma_cm_id *id);
struct ibv_mr *rd_reg_mr(struct ibv_pd *pd, uint64_t addr, uint64_t len);
int rd_dereg_mr(struct ibv_mr *mr);

// Data path. rd_post_send and rd_post_recv post n requests as one chain
// and return 0 or -errno with *bad set to the index of the first request
// not posted. rd_poll takes up to n completions of the connection's one CQ.
int rd_post_send(struct rdma_cm_id *id, const struct rd_send *reqs, int n,
		 const struct ibv_sge *sges, struct ibv_send_wr *wrs, int *bad);
int rd_post_recv(struct rdma_cm_id *id, const uint64_t *ids, int n, const struct ibv_sge *sges,
		 struct ibv_recv_wr *wrs, int *bad);
int rd_poll(struct ibv_cq *cq, struct rd_wc *out, int n);
int rd_arm(struct ibv_cq *cq);
// rd_get_cq_event takes and acks one completion event (one CQ, armed once:
// at most one is pending); it returns 1, or -errno (-EAGAIN when none was).
int rd_get_cq_event(struct ibv_comp_channel *ch);

const char *rd_wc_status_str(int status);

#endif
