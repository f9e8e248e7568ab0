/* RFC 7306 through libibverbs: the client does an RDMA Write with
 * immediate, a Fetch-and-Add and a Compare-and-Swap on the server's
 * memory, then a Send; the server checks the immediate's completion
 * (IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_WITH_IMM, imm_data in network order)
 * and its memory, the client the original values and opcodes.
 * Usage: rfc7306 server ADDR PORT | rfc7306 client ADDR PORT.
 * Exit 0: all checks held; 1: a check failed; 2: setup failed. */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#define IMM 0x12345678u

struct info {
	uint64_t addr;
	uint32_t rkey;
};

static int fails;

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s\n", role, __LINE__, #c); fails++; } } while (0)

static const char *role;

static struct rdma_cm_event *next(struct rdma_event_channel *ch, int want)
{
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e) || e->event != want) {
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
	if (n < 0) {
		fprintf(stderr, "%s: poll_cq failed\n", role);
		exit(2);
	}
	return wc;
}

static void post(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	if (ibv_post_send(qp, wr, &bad)) {
		fprintf(stderr, "%s: post_send opcode %d failed\n", role, wr->opcode);
		exit(2);
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id, *conn;
	struct rdma_cm_event *e;
	struct ibv_device_attr dev;
	struct ibv_qp_init_attr qa = { .cap = { 8, 8, 1, 1, 0 }, .qp_type = IBV_QPT_RC };
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint64_t *mem;
	int server;

	if (argc != 4 || !ch)
		return 2;
	role = argv[1];
	server = !strcmp(role, "server");
	inet_pton(AF_INET, argv[2], &a.sin_addr);
	a.sin_port = htons(atoi(argv[3]));
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return 2;
	if (server) {
		if (rdma_bind_addr(id, (struct sockaddr *)&a) || rdma_listen(id, 1))
			return 2;
		e = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
		conn = e->id;
		rdma_ack_cm_event(e);
	} else {
		conn = id;
		if (rdma_resolve_addr(conn, NULL, (struct sockaddr *)&a, 2000))
			return 2;
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
		if (rdma_resolve_route(conn, 2000))
			return 2;
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	}
	if (ibv_query_device(conn->verbs, &dev))
		return 2;
	CHECK(dev.atomic_cap == IBV_ATOMIC_HCA);
	pd = ibv_alloc_pd(conn->verbs);
	cq = ibv_create_cq(conn->verbs, 16, NULL, NULL, 0);
	mem = aligned_alloc(64, 64);
	if (!pd || !cq || !mem)
		return 2;
	memset(mem, 0, 64);
	mem[1] = 40;
	mem[2] = 7;
	mr = ibv_reg_mr(pd, mem, 64,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	if (!mr)
		return 2;
	qa.send_cq = qa.recv_cq = cq;
	if (rdma_create_qp(conn, pd, &qa))
		return 2;

	/* Each end's first receive: the server's for the Write with
	 * immediate (nothing is placed in it), then the client's "done". */
	struct ibv_sge rsge = { (uintptr_t)&mem[4], 16, mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 100, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	if (ibv_post_recv(conn->qp, &rwr, &rbad))
		return 2;
	if (server) {
		struct ibv_recv_wr rwr2 = { .wr_id = 101, .sg_list = &rsge, .num_sge = 1 };
		if (ibv_post_recv(conn->qp, &rwr2, &rbad))
			return 2;
	}
	if (server) {
		if (rdma_accept(conn, NULL))
			return 2;
	} else if (rdma_connect(conn, NULL)) {
		return 2;
	}
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));

	if (server) {
		/* Tell the client where: address and rkey, in a Send. */
		struct info *i = (struct info *)&mem[6];
		i->addr = (uintptr_t)mem;
		i->rkey = mr->rkey;
		struct ibv_sge s = { (uintptr_t)i, sizeof(*i), mr->lkey };
		struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
		post(conn->qp, &w);
		struct ibv_wc wc = wait_wc(cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND);
		/* The Write with immediate. */
		wc = wait_wc(cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 100);
		CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
		CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
		CHECK(ntohl(wc.imm_data) == IMM);
		CHECK(!memcmp(&mem[3], "written!", 8));
		/* The client's "done": the atomics ran before it. */
		wc = wait_wc(cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 101 && wc.opcode == IBV_WC_RECV);
		CHECK(mem[1] == 42);
		CHECK(mem[2] == 99);
	} else {
		struct ibv_wc wc = wait_wc(cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV);
		struct info peer = *(struct info *)&mem[4];
		memcpy(&mem[3], "written!", 8);
		struct ibv_sge s = { (uintptr_t)&mem[3], 8, mr->lkey };
		struct ibv_send_wr w = { .wr_id = 2, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
					 .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(IMM) };
		w.wr.rdma.remote_addr = peer.addr + 24;
		w.wr.rdma.rkey = peer.rkey;
		post(conn->qp, &w);
		wc = wait_wc(cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 2 && wc.opcode == IBV_WC_RDMA_WRITE);

		struct ibv_sge r1 = { (uintptr_t)&mem[6], 8, mr->lkey };
		struct ibv_send_wr fa = { .wr_id = 3, .sg_list = &r1, .num_sge = 1,
					  .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
					  .send_flags = IBV_SEND_SIGNALED };
		fa.wr.atomic.remote_addr = peer.addr + 8;
		fa.wr.atomic.rkey = peer.rkey;
		fa.wr.atomic.compare_add = 2;
		post(conn->qp, &fa);
		wc = wait_wc(cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 3 && wc.opcode == IBV_WC_FETCH_ADD);
		CHECK(mem[6] == 40);

		struct ibv_sge r2 = { (uintptr_t)&mem[7], 8, mr->lkey };
		struct ibv_send_wr cs = { .wr_id = 4, .sg_list = &r2, .num_sge = 1,
					  .opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
					  .send_flags = IBV_SEND_SIGNALED };
		cs.wr.atomic.remote_addr = peer.addr + 16;
		cs.wr.atomic.rkey = peer.rkey;
		cs.wr.atomic.compare_add = 7;
		cs.wr.atomic.swap = 99;
		post(conn->qp, &cs);
		wc = wait_wc(cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 4 && wc.opcode == IBV_WC_COMP_SWAP);
		CHECK(mem[7] == 7);

		/* Send with immediate: the iWARP wire has no Send carrying an
		 * immediate (docs/rfc7306.md, "Send with Immediate: not supported"); refused with EINVAL,
		 * as iw_cxgb4 and irdma refuse it, and nothing is sent. */
		struct ibv_send_wr si = { .wr_id = 5, .sg_list = &s, .num_sge = 1,
					  .opcode = IBV_WR_SEND_WITH_IMM, .imm_data = htonl(1) }, *bad = NULL;
		CHECK(ibv_post_send(conn->qp, &si, &bad) == EINVAL && bad == &si);

		struct ibv_send_wr done = { .wr_id = 6, .sg_list = &s, .num_sge = 1,
					    .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
		post(conn->qp, &done);
		wc = wait_wc(cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 6);
	}
	printf("%s: %s\n", role, fails ? "FAILED" : "ok");
	fflush(stdout);
	rdma_disconnect(conn);
	return fails ? 1 : 0;
}
