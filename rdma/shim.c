//go:build cgo

// shim.c: dlopen'd bindings to libibverbs and librdmacm (see shim.h).

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "shim.h"

// FN lists every exported rdma-core function the shim calls: library, name.
#define FNS(X)                                   \
	X(verbs, ibv_alloc_pd)                   \
	X(verbs, ibv_dealloc_pd)                 \
	X(verbs, ibv_create_comp_channel)        \
	X(verbs, ibv_destroy_comp_channel)       \
	X(verbs, ibv_create_cq)                  \
	X(verbs, ibv_destroy_cq)                 \
	X(verbs, ibv_get_cq_event)               \
	X(verbs, ibv_ack_cq_events)              \
	X(verbs, ibv_reg_mr)                     \
	X(verbs, ibv_dereg_mr)                   \
	X(verbs, ibv_modify_qp)                  \
	X(verbs, ibv_query_device)               \
	X(verbs, ibv_wc_status_str)              \
	X(cm, rdma_create_event_channel)         \
	X(cm, rdma_destroy_event_channel)        \
	X(cm, rdma_create_id)                    \
	X(cm, rdma_destroy_id)                   \
	X(cm, rdma_migrate_id)                   \
	X(cm, rdma_resolve_addr)                 \
	X(cm, rdma_resolve_route)                \
	X(cm, rdma_bind_addr)                    \
	X(cm, rdma_listen)                       \
	X(cm, rdma_create_qp)                    \
	X(cm, rdma_destroy_qp)                   \
	X(cm, rdma_connect)                      \
	X(cm, rdma_accept)                       \
	X(cm, rdma_reject)                       \
	X(cm, rdma_disconnect)                   \
	X(cm, rdma_get_cm_event)                 \
	X(cm, rdma_ack_cm_event)

// ibv_reg_mr is a function-like macro in rdma-core >= 29; written without
// arguments it names the exported function, whose symbol is "ibv_reg_mr".
#define DECL(lib, name) static __typeof__(&name) fn_##name;
FNS(DECL)
#undef DECL

static void *lib_verbs, *lib_cm;

int rd_load(const char *verbs_name, const char *cm_name, char *err, int errlen)
{
	void *verbs = dlopen(verbs_name, RTLD_NOW | RTLD_LOCAL);
	if (!verbs) {
		snprintf(err, errlen, "%s", dlerror());
		return -1;
	}
	void *cm = dlopen(cm_name, RTLD_NOW | RTLD_LOCAL);
	if (!cm) {
		snprintf(err, errlen, "%s", dlerror());
		dlclose(verbs);
		return -1;
	}
#define LOAD(lib, name)                                                          \
	*(void **)(&fn_##name) = dlsym(lib, #name);                              \
	if (!fn_##name) {                                                        \
		snprintf(err, errlen, "%s: symbol %s not found", lib##_name, #name); \
		dlclose(cm);                                                     \
		dlclose(verbs);                                                  \
		return -1;                                                       \
	}
	FNS(LOAD)
#undef LOAD
	lib_verbs = verbs;
	lib_cm = cm;
	return 0;
}

static int neg_errno(void)
{
	return errno ? -errno : -EIO;
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return neg_errno();
	return 0;
}

struct rdma_event_channel *rd_create_channel(void)
{
	errno = 0;
	struct rdma_event_channel *ch = fn_rdma_create_event_channel();
	if (!ch)
		return NULL;
	int r = set_nonblock(ch->fd);
	if (r) {
		fn_rdma_destroy_event_channel(ch);
		errno = -r;
		return NULL;
	}
	return ch;
}

void rd_destroy_channel(struct rdma_event_channel *ch)
{
	fn_rdma_destroy_event_channel(ch);
}

struct rdma_cm_id *rd_create_id(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id = NULL;
	errno = 0;
	if (fn_rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return NULL;
	return id;
}

int rd_destroy_id(struct rdma_cm_id *id)
{
	if (fn_rdma_destroy_id(id))
		return neg_errno();
	return 0;
}

int rd_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *ch)
{
	if (fn_rdma_migrate_id(id, ch))
		return neg_errno();
	return 0;
}

// to_sockaddr fills ss from 4 or 16 address bytes; it returns 0 for len 0.
static int to_sockaddr(struct sockaddr_storage *ss, const uint8_t *ip, int len, uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	if (len == 4) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		memcpy(&sin->sin_addr, ip, 4);
		return 1;
	}
	if (len == 16) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		memcpy(&sin6->sin6_addr, ip, 16);
		return 1;
	}
	return 0;
}

int rd_resolve_addr(struct rdma_cm_id *id, const uint8_t *src, int srclen, uint16_t srcport,
		    const uint8_t *dst, int dstlen, uint16_t dstport, int timeout_ms)
{
	struct sockaddr_storage s, d;
	int has_src = to_sockaddr(&s, src, srclen, srcport);
	if (!to_sockaddr(&d, dst, dstlen, dstport))
		return -EINVAL;
	if (fn_rdma_resolve_addr(id, has_src ? (struct sockaddr *)&s : NULL, (struct sockaddr *)&d,
				 timeout_ms))
		return neg_errno();
	return 0;
}

int rd_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	if (fn_rdma_resolve_route(id, timeout_ms))
		return neg_errno();
	return 0;
}

int rd_bind_listen(struct rdma_cm_id *id, const uint8_t *ip, int iplen, uint16_t port, int backlog)
{
	struct sockaddr_storage s;
	if (!to_sockaddr(&s, ip, iplen, port))
		return -EINVAL;
	if (fn_rdma_bind_addr(id, (struct sockaddr *)&s))
		return neg_errno();
	if (fn_rdma_listen(id, backlog))
		return neg_errno();
	return 0;
}

int rd_get_event(struct rdma_event_channel *ch, struct rd_event *out)
{
	struct rdma_cm_event *ev;
	if (fn_rdma_get_cm_event(ch, &ev))
		return neg_errno();
	memset(out, 0, sizeof(*out));
	out->type = ev->event;
	out->status = ev->status;
	out->id = ev->id;
	out->listen_id = ev->listen_id;
	out->responder_resources = ev->param.conn.responder_resources;
	out->initiator_depth = ev->param.conn.initiator_depth;
	if (ev->param.conn.private_data && ev->param.conn.private_data_len) {
		out->private_data_len = ev->param.conn.private_data_len;
		memcpy(out->private_data, ev->param.conn.private_data, out->private_data_len);
	}
	fn_rdma_ack_cm_event(ev);
	return 0;
}

int rd_connect(struct rdma_cm_id *id, const void *pd, int pdlen, int rr, int id_depth,
	       int retry, int rnr_retry)
{
	struct rdma_conn_param p;
	memset(&p, 0, sizeof(p));
	p.private_data = pdlen ? pd : NULL;
	p.private_data_len = pdlen;
	p.responder_resources = rr;
	p.initiator_depth = id_depth;
	p.retry_count = retry;
	p.rnr_retry_count = rnr_retry;
	if (fn_rdma_connect(id, &p))
		return neg_errno();
	return 0;
}

int rd_accept(struct rdma_cm_id *id, const void *pd, int pdlen, int rr, int id_depth, int rnr_retry)
{
	struct rdma_conn_param p;
	memset(&p, 0, sizeof(p));
	p.private_data = pdlen ? pd : NULL;
	p.private_data_len = pdlen;
	p.responder_resources = rr;
	p.initiator_depth = id_depth;
	p.rnr_retry_count = rnr_retry;
	if (fn_rdma_accept(id, &p))
		return neg_errno();
	return 0;
}

int rd_reject(struct rdma_cm_id *id, const void *pd, int pdlen)
{
	if (fn_rdma_reject(id, pdlen ? pd : NULL, pdlen))
		return neg_errno();
	return 0;
}

int rd_disconnect(struct rdma_cm_id *id)
{
	if (fn_rdma_disconnect(id))
		return neg_errno();
	return 0;
}

struct rd_sockaddr rd_addr(struct rdma_cm_id *id, int peer)
{
	struct rd_sockaddr out;
	memset(&out, 0, sizeof(out));
	struct sockaddr *sa = peer ? &id->route.addr.dst_addr : &id->route.addr.src_addr;
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)sa;
		memcpy(out.ip, &sin->sin_addr, 4);
		out.port = ntohs(sin->sin_port);
		out.family = 4;
	} else if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)sa;
		memcpy(out.ip, &sin6->sin6_addr, 16);
		out.port = ntohs(sin6->sin6_port);
		out.family = 6;
	}
	return out;
}

const char *rd_device_name(struct rdma_cm_id *id)
{
	if (!id->verbs || !id->verbs->device)
		return "";
	return id->verbs->device->name;
}

struct rd_devattr rd_query_device(struct rdma_cm_id *id)
{
	struct rd_devattr out;
	struct ibv_device_attr a;
	memset(&out, 0, sizeof(out));
	if (!id->verbs) {
		out.err = -ENODEV;
		return out;
	}
	int r = fn_ibv_query_device(id->verbs, &a);
	if (r) {
		out.err = r > 0 ? -r : neg_errno();
		return out;
	}
	out.max_qp_rd_atom = a.max_qp_rd_atom;
	out.max_qp_init_rd_atom = a.max_qp_init_rd_atom;
	out.max_qp_wr = a.max_qp_wr;
	out.max_sge = a.max_sge;
	out.max_cqe = a.max_cqe;
	return out;
}

struct ibv_pd *rd_alloc_pd(struct rdma_cm_id *id)
{
	errno = 0;
	return fn_ibv_alloc_pd(id->verbs);
}

int rd_dealloc_pd(struct ibv_pd *pd)
{
	int r = fn_ibv_dealloc_pd(pd);
	return r > 0 ? -r : r;
}

struct ibv_comp_channel *rd_create_comp_channel(struct rdma_cm_id *id)
{
	errno = 0;
	struct ibv_comp_channel *ch = fn_ibv_create_comp_channel(id->verbs);
	if (!ch)
		return NULL;
	int r = set_nonblock(ch->fd);
	if (r) {
		fn_ibv_destroy_comp_channel(ch);
		errno = -r;
		return NULL;
	}
	return ch;
}

int rd_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	int r = fn_ibv_destroy_comp_channel(ch);
	return r > 0 ? -r : r;
}

struct ibv_cq *rd_create_cq(struct rdma_cm_id *id, int cqe, struct ibv_comp_channel *ch)
{
	errno = 0;
	return fn_ibv_create_cq(id->verbs, cqe, NULL, ch, 0);
}

int rd_destroy_cq(struct ibv_cq *cq)
{
	int r = fn_ibv_destroy_cq(cq);
	return r > 0 ? -r : r;
}

int rd_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
		 int send_wr, int recv_wr, int send_sge, int recv_sge)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.cap.max_send_wr = send_wr;
	a.cap.max_recv_wr = recv_wr;
	a.cap.max_send_sge = send_sge;
	a.cap.max_recv_sge = recv_sge;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 0;
	if (fn_rdma_create_qp(id, pd, &a))
		return neg_errno();
	return 0;
}

void rd_destroy_qp(struct rdma_cm_id *id)
{
	if (id->qp)
		fn_rdma_destroy_qp(id);
}

int rd_qp_to_error(struct rdma_cm_id *id)
{
	struct ibv_qp_attr a;
	if (!id->qp)
		return 0;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	int r = fn_ibv_modify_qp(id->qp, &a, IBV_QP_STATE);
	return r > 0 ? -r : r;
}

struct ibv_mr *rd_reg_mr(struct ibv_pd *pd, uint64_t addr, uint64_t len)
{
	errno = 0;
	return fn_ibv_reg_mr(pd, (void *)(uintptr_t)addr, len,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
				     IBV_ACCESS_REMOTE_WRITE);
}

int rd_dereg_mr(struct ibv_mr *mr)
{
	int r = fn_ibv_dereg_mr(mr);
	return r > 0 ? -r : r;
}

int rd_post_send(struct rdma_cm_id *id, const struct rd_send *reqs, int n,
		 const struct ibv_sge *sges, struct ibv_send_wr *wrs, int *bad)
{
	const struct ibv_sge *sge = sges;
	*bad = 0;
	for (int i = 0; i < n; i++) {
		struct ibv_send_wr *wr = &wrs[i];
		memset(wr, 0, sizeof(*wr));
		wr->wr_id = reqs[i].id;
		wr->next = i + 1 < n ? &wrs[i + 1] : NULL;
		wr->sg_list = (struct ibv_sge *)sge;
		wr->num_sge = reqs[i].nsge;
		wr->opcode = reqs[i].opcode;
		wr->send_flags = reqs[i].flags;
		wr->wr.rdma.remote_addr = reqs[i].remote_addr;
		wr->wr.rdma.rkey = reqs[i].rkey;
		sge += reqs[i].nsge;
	}
	struct ibv_send_wr *badwr = NULL;
	int r = ibv_post_send(id->qp, wrs, &badwr);
	if (r) {
		*bad = badwr ? (int)(badwr - wrs) : 0;
		return r > 0 ? -r : r;
	}
	*bad = n;
	return 0;
}

int rd_post_recv(struct rdma_cm_id *id, const uint64_t *ids, int n, const struct ibv_sge *sges,
		 struct ibv_recv_wr *wrs, int *bad)
{
	*bad = 0;
	for (int i = 0; i < n; i++) {
		struct ibv_recv_wr *wr = &wrs[i];
		wr->wr_id = ids[i];
		wr->next = i + 1 < n ? &wrs[i + 1] : NULL;
		wr->sg_list = (struct ibv_sge *)&sges[i];
		wr->num_sge = sges[i].length ? 1 : 0;
	}
	struct ibv_recv_wr *badwr = NULL;
	int r = ibv_post_recv(id->qp, wrs, &badwr);
	if (r) {
		*bad = badwr ? (int)(badwr - wrs) : 0;
		return r > 0 ? -r : r;
	}
	*bad = n;
	return 0;
}

#define RD_POLL_MAX 64

int rd_poll(struct ibv_cq *cq, struct rd_wc *out, int n)
{
	struct ibv_wc wc[RD_POLL_MAX];
	if (n > RD_POLL_MAX)
		n = RD_POLL_MAX;
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].byte_len = wc[i].byte_len;
		out[i].invalidated_rkey =
			(wc[i].wc_flags & IBV_WC_WITH_INV) ? wc[i].invalidated_rkey : 0;
		out[i].wc_flags = wc[i].wc_flags;
		out[i].vendor_err = wc[i].vendor_err;
	}
	return got < 0 ? -EIO : got;
}

int rd_arm(struct ibv_cq *cq)
{
	int r = ibv_req_notify_cq(cq, 0);
	return r > 0 ? -r : r;
}

int rd_get_cq_event(struct ibv_comp_channel *ch)
{
	struct ibv_cq *cq;
	void *ctx;
	errno = 0;
	if (fn_ibv_get_cq_event(ch, &cq, &ctx))
		return neg_errno();
	fn_ibv_ack_cq_events(cq, 1);
	return 1;
}

const char *rd_wc_status_str(int status)
{
	return fn_ibv_wc_status_str(status);
}
