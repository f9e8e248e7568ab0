/* Shared receive queues through libibverbs and librdmacm: the server's
 * two QPs (rdma_create_qp with qp_init_attr.srq) take the client's Sends
 * from one SRQ made with ibv_create_srq; the client's two QPs take the
 * server's answers from one SRQ made with rdma_create_srq (the first QP
 * gets it from id->srq, the second from its attributes). Each end checks
 * every receive's data, wr_id (the SRQ's buffers are taken in post
 * order) and qp_num (the QP the message came in on), and the SRQ verbs'
 * answers: attributes written back and queried, a resize refused, a limit
 * armed, read back and disarmed (one above the depth refused), a list with
 * a bad request stopped there (bad_wr), ibv_post_recv on a QP with an SRQ
 * refused, ibv_destroy_srq EBUSY while a QP uses it and 0 after. The
 * limit event: the server arms 6 over its 8 buffers (the third receive
 * leaves 5), the client 8 over its 8 (the first leaves 7); each end then
 * gets one IBV_EVENT_SRQ_LIMIT_REACHED naming its SRQ from
 * ibv_get_async_event (async_fd readable before, not after), the limit
 * reads 0 again, and the later receives bring no second event.
 * Usage: srq PORT (server) | srq PORT SERVER_ADDR (client).
 * Exit 0: all checks held; 1: a check failed; 2: setup failed. */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define CONNS 2
#define MSGS 2 /* per connection */
#define BUFS 8 /* receive buffers posted to an SRQ */
#define SLOT 64

static int fails;
static const char *role;

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s\n", role, __LINE__, #c); fails++; } } while (0)
#define SETUP(c) do { if (!(c)) { fprintf(stderr, "%s:%d: setup: %s (errno %d)\n", role, __LINE__, #c, errno); exit(2); } } while (0)

static struct rdma_cm_event *next(struct rdma_event_channel *ch, int want)
{
	struct rdma_cm_event *e = NULL;
	if (rdma_get_cm_event(ch, &e) || (int)e->event != want) {
		fprintf(stderr, "%s: CM event %d, wanted %s\n", role, e ? (int)e->event : -1,
			rdma_event_str(want));
		exit(2);
	}
	return e;
}

static struct ibv_wc wait_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	SETUP(n == 1);
	return wc;
}

/* The SRQ verbs' answers on a fresh SRQ of 16 buffers of 1 entry. */
static void check_srq_verbs(struct ibv_srq *srq)
{
	struct ibv_srq_attr a;
	CHECK(ibv_query_srq(srq, &a) == 0);
	CHECK(a.max_wr == 16 && a.max_sge == 1 && a.srq_limit == 0);
	a.max_wr = 32;
	CHECK(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR) == EINVAL);
	a.srq_limit = 17;
	CHECK(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT) == EINVAL);
	a.srq_limit = 4;
	CHECK(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT) == 0);
	CHECK(ibv_query_srq(srq, &a) == 0);
	CHECK(a.srq_limit == 4);
	a.srq_limit = 0;
	CHECK(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT) == 0);
	CHECK(ibv_query_srq(srq, &a) == 0);
	CHECK(a.srq_limit == 0);
}

/* Arm the SRQ's limit at `limit`; no event is pending yet. The context's
 * event descriptor is made non-blocking, so a missing event fails the
 * check instead of hanging. */
static void arm_limit(struct ibv_context *ctx, struct ibv_srq *srq, uint32_t limit)
{
	struct ibv_srq_attr a = { .srq_limit = limit };
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	int fl = fcntl(ctx->async_fd, F_GETFL);
	SETUP(fl >= 0 && fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0);
	CHECK(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT) == 0);
	CHECK(ibv_query_srq(srq, &a) == 0);
	CHECK(a.srq_limit == limit);
	CHECK(poll(&p, 1, 0) == 0);
}

/* The limit fired once: one event naming the SRQ (async_fd readable
 * until it is taken), counted by its ack; the limit disarmed; no other. */
static void check_limit_event(struct ibv_context *ctx, struct ibv_srq *srq)
{
	struct ibv_async_event ev;
	struct ibv_srq_attr a;
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	memset(&ev, 0, sizeof(ev));
	CHECK(poll(&p, 1, 5000) == 1);
	CHECK(ibv_get_async_event(ctx, &ev) == 0);
	CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED);
	CHECK(ev.element.srq == srq);
	ibv_ack_async_event(&ev);
	CHECK(srq->events_completed == 1);
	CHECK(ibv_query_srq(srq, &a) == 0);
	CHECK(a.srq_limit == 0);
	CHECK(poll(&p, 1, 0) == 0);
	errno = 0;
	CHECK(ibv_get_async_event(ctx, &ev) == -1 && errno == EAGAIN);
}

/* Post `n` buffers of `mem` to the SRQ, wr_id = slot; the first goes in
 * a list whose second request has too many entries (refused, bad_wr). */
static void post_bufs(struct ibv_srq *srq, struct ibv_mr *mr, char *mem, int n)
{
	struct ibv_sge s[5];
	struct ibv_recv_wr w[2], *bad = NULL;
	int i;
	for (i = 0; i < 5; i++) {
		s[i].addr = (uintptr_t)mem;
		s[i].length = SLOT;
		s[i].lkey = mr->lkey;
	}
	memset(w, 0, sizeof(w));
	w[0].wr_id = 0;
	w[0].sg_list = s;
	w[0].num_sge = 1;
	w[0].next = &w[1];
	w[1].wr_id = 99;
	w[1].sg_list = s;
	w[1].num_sge = 5;
	CHECK(ibv_post_srq_recv(srq, w, &bad) == EINVAL);
	CHECK(bad == &w[1]);
	for (i = 1; i < n; i++) {
		struct ibv_sge one = { (uintptr_t)(mem + i * SLOT), SLOT, mr->lkey };
		struct ibv_recv_wr r = { .wr_id = i, .sg_list = &one, .num_sge = 1 };
		SETUP(ibv_post_srq_recv(srq, &r, &bad) == 0);
	}
}

/* An SRQ's QP refuses ibv_post_recv, and its attributes name the SRQ. */
static void check_qp(struct ibv_qp *qp, struct ibv_srq *srq, struct ibv_mr *mr, char *mem)
{
	struct ibv_sge s = { (uintptr_t)mem, SLOT, mr->lkey };
	struct ibv_recv_wr r = { .wr_id = 7, .sg_list = &s, .num_sge = 1 }, *bad = NULL;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(qp->srq == srq);
	CHECK(ibv_post_recv(qp, &r, &bad) != 0);
	CHECK(bad == &r);
	CHECK(ibv_query_qp(qp, &qa, IBV_QP_CAP, &qi) == 0);
	CHECK(qi.srq == srq);
}

/* `want` receives of "<tag> <k> <j>" from the SRQ's buffers: each one's
 * data, wr_id (the buffers in post order: 0..want-1, once each) and
 * qp_num (that of the QP of connection k). */
static void check_recvs(struct ibv_cq *cq, char *mem, const char *tag, uint32_t *qpn, int want)
{
	int seen[BUFS] = { 0 }, got[CONNS][MSGS] = { { 0 } };
	int i, k, j;
	for (i = 0; i < want; i++) {
		struct ibv_wc wc = wait_wc(cq);
		char t[16];
		CHECK(wc.status == IBV_WC_SUCCESS);
		CHECK(wc.opcode == IBV_WC_RECV);
		if (wc.opcode != IBV_WC_RECV || wc.wr_id >= BUFS) {
			fprintf(stderr, "%s: completion opcode %d wr_id %llu\n", role, wc.opcode,
				(unsigned long long)wc.wr_id);
			fails++;
			continue;
		}
		CHECK(wc.wr_id < (uint64_t)want);
		CHECK(!seen[wc.wr_id]);
		seen[wc.wr_id] = 1;
		const char *m = mem + wc.wr_id * SLOT;
		CHECK(wc.byte_len == strlen(m) + 1);
		if (sscanf(m, "%15s %d %d", t, &k, &j) != 3 || strcmp(t, tag) || k < 0 ||
		    k >= CONNS || j < 0 || j >= MSGS) {
			fprintf(stderr, "%s: unexpected message '%.*s'\n", role, SLOT, m);
			fails++;
			continue;
		}
		CHECK(wc.qp_num == qpn[k]);
		got[k][j]++;
	}
	for (k = 0; k < CONNS; k++)
		for (j = 0; j < want / CONNS; j++)
			CHECK(got[k][j] == 1);
}

/* Send "<tag> <k> <j>" for j < n on `qp`, from `mem`'s slots. */
static void send_msgs(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *mr, char *mem,
		      const char *tag, int k, int n)
{
	int j;
	for (j = 0; j < n; j++) {
		char *m = mem + j * SLOT;
		snprintf(m, SLOT, "%s %d %d", tag, k, j);
		struct ibv_sge s = { (uintptr_t)m, strlen(m) + 1, mr->lkey };
		struct ibv_send_wr w = { .wr_id = 1000 + j, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
		SETUP(ibv_post_send(qp, &w, &bad) == 0);
		struct ibv_wc wc = wait_wc(cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND);
		CHECK(wc.wr_id == 1000u + j && wc.qp_num == qp->qp_num);
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen_id = NULL, *ids[CONNS];
	struct rdma_cm_event *e;
	struct ibv_device_attr dev;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL, *scq = NULL; /* receives, sends */
	struct ibv_mr *mr = NULL;
	uint32_t qpn[CONNS];
	char *rx, *tx;
	int server, k;

	if ((argc != 2 && argc != 3) || !ch)
		return 2;
	server = argc == 2;
	role = server ? "server" : "client";
	a.sin_port = htons(atoi(argv[1]));
	if (!server)
		inet_pton(AF_INET, argv[2], &a.sin_addr);
	rx = aligned_alloc(64, BUFS * SLOT);
	tx = aligned_alloc(64, BUFS * SLOT);
	SETUP(rx && tx);
	memset(rx, 0, BUFS * SLOT);
	memset(tx, 0, BUFS * SLOT);

	if (server) {
		SETUP(rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP) == 0);
		SETUP(rdma_bind_addr(listen_id, (struct sockaddr *)&a) == 0);
		SETUP(rdma_listen(listen_id, CONNS) == 0);
		/* Two requests (connection k's private data is k), each
		 * ESTABLISHED after its accept, the second request perhaps
		 * before the first's ESTABLISHED. */
		int requests = 0, established = 0;
		while (established < CONNS) {
			SETUP(rdma_get_cm_event(ch, &e) == 0);
			if (e->event == RDMA_CM_EVENT_ESTABLISHED) {
				established++;
				rdma_ack_cm_event(e);
				continue;
			}
			SETUP(e->event == RDMA_CM_EVENT_CONNECT_REQUEST && requests < CONNS);
			struct rdma_cm_id *c = e->id;
			SETUP(e->param.conn.private_data_len >= 1);
			k = *(const unsigned char *)e->param.conn.private_data;
			SETUP(k >= 0 && k < CONNS);
			rdma_ack_cm_event(e);
			/* The resources, on the first request's device. */
			if (requests++ == 0) {
				struct ibv_context *ctx = c->verbs;
				SETUP(ctx);
				SETUP(ibv_query_device(ctx, &dev) == 0);
				CHECK(dev.max_srq > 0 && dev.max_srq_wr >= 16 && dev.max_srq_sge >= 1);
				SETUP(pd = ibv_alloc_pd(ctx));
				SETUP(cq = ibv_create_cq(ctx, 64, NULL, NULL, 0));
				SETUP(scq = ibv_create_cq(ctx, 64, NULL, NULL, 0));
				SETUP(mr = ibv_reg_mr(pd, rx, BUFS * SLOT, IBV_ACCESS_LOCAL_WRITE));
				struct ibv_srq_init_attr bad_attr = { .attr = { .max_wr = 0, .max_sge = 1 } };
				CHECK(ibv_create_srq(pd, &bad_attr) == NULL);
				bad_attr.attr.max_wr = 16;
				bad_attr.attr.max_sge = dev.max_srq_sge + 1;
				CHECK(ibv_create_srq(pd, &bad_attr) == NULL);
				SETUP(srq = ibv_create_srq(pd, &sa));
				CHECK(sa.attr.max_wr == 16 && sa.attr.max_sge == 1);
				check_srq_verbs(srq);
				post_bufs(srq, mr, rx, BUFS);
				arm_limit(ctx, srq, BUFS - 2);
			}
			struct ibv_qp_init_attr qa = { .send_cq = scq, .recv_cq = cq, .srq = srq,
						       .cap = { .max_send_wr = 8, .max_send_sge = 1 },
						       .qp_type = IBV_QPT_RC };
			SETUP(rdma_create_qp(c, pd, &qa) == 0);
			CHECK(qa.cap.max_recv_wr == 0);
			check_qp(c->qp, srq, mr, rx);
			ids[k] = c;
			qpn[k] = c->qp->qp_num;
			SETUP(rdma_accept(c, NULL) == 0);
		}
		CHECK(qpn[0] != qpn[1]);
		CHECK(ibv_destroy_srq(srq) == EBUSY);
		check_recvs(cq, rx, "client", qpn, CONNS * MSGS);
		check_limit_event(pd->context, srq);
		/* Answer on each connection; the client checks where they came. */
		struct ibv_mr *tmr;
		SETUP(tmr = ibv_reg_mr(pd, tx, BUFS * SLOT, IBV_ACCESS_LOCAL_WRITE));
		for (k = 0; k < CONNS; k++)
			send_msgs(ids[k]->qp, scq, tmr, tx + k * MSGS * SLOT, "server", k, 1);
		/* The client disconnects. */
		for (k = 0; k < CONNS; k++) {
			e = next(ch, RDMA_CM_EVENT_DISCONNECTED);
			rdma_ack_cm_event(e);
		}
		for (k = 0; k < CONNS; k++) {
			rdma_destroy_qp(ids[k]);
			rdma_destroy_id(ids[k]);
		}
		CHECK(ibv_destroy_srq(srq) == 0);
		ibv_dereg_mr(tmr);
	} else {
		for (k = 0; k < CONNS; k++) {
			SETUP(rdma_create_id(ch, &ids[k], NULL, RDMA_PS_TCP) == 0);
			SETUP(rdma_resolve_addr(ids[k], NULL, (struct sockaddr *)&a, 2000) == 0);
			rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
			SETUP(rdma_resolve_route(ids[k], 2000) == 0);
			rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
		}
		struct ibv_context *ctx = ids[0]->verbs;
		SETUP(pd = ibv_alloc_pd(ctx));
		SETUP(cq = ibv_create_cq(ctx, 64, NULL, NULL, 0));
		SETUP(scq = ibv_create_cq(ctx, 64, NULL, NULL, 0));
		SETUP(mr = ibv_reg_mr(pd, rx, BUFS * SLOT, IBV_ACCESS_LOCAL_WRITE));
		/* librdmacm's SRQ: on ids[0], used by both QPs. */
		SETUP(rdma_create_srq(ids[0], pd, &sa) == 0);
		srq = ids[0]->srq;
		SETUP(srq);
		CHECK(sa.attr.max_wr == 16 && sa.attr.max_sge == 1);
		check_srq_verbs(srq);
		post_bufs(srq, mr, rx, BUFS);
		arm_limit(ctx, srq, BUFS);
		for (k = 0; k < CONNS; k++) {
			struct ibv_qp_init_attr qa = { .send_cq = scq, .recv_cq = cq,
						       .srq = k ? srq : NULL,
						       .cap = { .max_send_wr = 8, .max_recv_wr = 8,
								.max_send_sge = 1, .max_recv_sge = 1 },
						       .qp_type = IBV_QPT_RC };
			SETUP(rdma_create_qp(ids[k], pd, &qa) == 0);
			check_qp(ids[k]->qp, srq, mr, rx);
			qpn[k] = ids[k]->qp->qp_num;
			unsigned char pdata = k;
			struct rdma_conn_param p = { .private_data = &pdata, .private_data_len = 1 };
			SETUP(rdma_connect(ids[k], &p) == 0);
			rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));
		}
		CHECK(ibv_destroy_srq(srq) == EBUSY);
		struct ibv_mr *tmr;
		SETUP(tmr = ibv_reg_mr(pd, tx, BUFS * SLOT, IBV_ACCESS_LOCAL_WRITE));
		for (k = 0; k < CONNS; k++)
			send_msgs(ids[k]->qp, scq, tmr, tx + k * MSGS * SLOT, "client", k, MSGS);
		check_recvs(cq, rx, "server", qpn, CONNS);
		check_limit_event(ctx, srq);
		for (k = 0; k < CONNS; k++) {
			SETUP(rdma_disconnect(ids[k]) == 0);
			rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_DISCONNECTED));
		}
		for (k = 0; k < CONNS; k++)
			rdma_destroy_qp(ids[k]);
		rdma_destroy_srq(ids[0]);
		CHECK(ids[0]->srq == NULL);
		for (k = 0; k < CONNS; k++)
			rdma_destroy_id(ids[k]);
		ibv_dereg_mr(tmr);
	}
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_destroy_cq(scq);
	ibv_dealloc_pd(pd);
	if (listen_id)
		rdma_destroy_id(listen_id);
	rdma_destroy_event_channel(ch);
	printf("%s: %s\n", role, fails ? "FAILED" : "ok");
	return fails ? 1 : 0;
}
