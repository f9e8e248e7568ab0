/* A Send that finds the SRQ empty ends the connection, loudly: iWARP has
 * no receiver-not-ready retry (RFC 5041 section 7: DDP "no buffer
 * available"), so the server's QP sends a Terminate and both ends get
 * DISCONNECTED; the library names the cause on standard error at both
 * ends (the test reads it). The server's SRQ holds one buffer; the
 * client sends two messages. The server gets the first (success, its
 * qp_num) and no completion for the second (it took no buffer); every
 * one of the client's Sends completes, in success or flushed.
 * Usage: srq_empty PORT (server) | srq_empty PORT SERVER_ADDR (client).
 * Exit 0: all checks held; 1: a check failed; 2: setup failed. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

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

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen_id = NULL, *id = NULL;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *srq = NULL;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_wc wc[4];
	char *mem;
	int server, n, i;

	if ((argc != 2 && argc != 3) || !ch)
		return 2;
	server = argc == 2;
	role = server ? "server" : "client";
	a.sin_port = htons(atoi(argv[1]));
	if (!server)
		inet_pton(AF_INET, argv[2], &a.sin_addr);
	mem = aligned_alloc(64, 2 * SLOT);
	SETUP(mem);
	memset(mem, 0, 2 * SLOT);

	if (server) {
		SETUP(rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP) == 0);
		SETUP(rdma_bind_addr(listen_id, (struct sockaddr *)&a) == 0);
		SETUP(rdma_listen(listen_id, 1) == 0);
		struct rdma_cm_event *e = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
		id = e->id;
		rdma_ack_cm_event(e);
		SETUP(pd = ibv_alloc_pd(id->verbs));
		SETUP(cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0));
		SETUP(mr = ibv_reg_mr(pd, mem, 2 * SLOT, IBV_ACCESS_LOCAL_WRITE));
		SETUP(srq = ibv_create_srq(pd, &sa));
		/* One buffer: the client's second Send finds none. */
		struct ibv_sge s = { (uintptr_t)mem, SLOT, mr->lkey };
		struct ibv_recv_wr r = { .wr_id = 7, .sg_list = &s, .num_sge = 1 }, *bad;
		SETUP(ibv_post_srq_recv(srq, &r, &bad) == 0);
		struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .srq = srq,
					       .cap = { .max_send_wr = 4, .max_send_sge = 1 },
					       .qp_type = IBV_QPT_RC };
		SETUP(rdma_create_qp(id, pd, &qa) == 0);
		SETUP(rdma_accept(id, NULL) == 0);
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));
		while ((n = ibv_poll_cq(cq, 4, wc)) == 0)
			;
		CHECK(n == 1);
		CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RECV);
		CHECK(wc[0].wr_id == 7 && wc[0].qp_num == id->qp->qp_num);
		CHECK(strcmp(mem, "first") == 0);
		/* The second Send ends the connection. */
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_DISCONNECTED));
		/* It took no buffer: nothing to complete. */
		CHECK(ibv_poll_cq(cq, 4, wc) == 0);
		rdma_destroy_qp(id);
		CHECK(ibv_destroy_srq(srq) == 0);
	} else {
		SETUP(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
		SETUP(rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) == 0);
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
		SETUP(rdma_resolve_route(id, 2000) == 0);
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
		SETUP(pd = ibv_alloc_pd(id->verbs));
		SETUP(cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0));
		SETUP(mr = ibv_reg_mr(pd, mem, 2 * SLOT, IBV_ACCESS_LOCAL_WRITE));
		struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq,
					       .cap = { .max_send_wr = 4, .max_recv_wr = 1,
							.max_send_sge = 1, .max_recv_sge = 1 },
					       .qp_type = IBV_QPT_RC };
		SETUP(rdma_create_qp(id, pd, &qa) == 0);
		SETUP(rdma_connect(id, NULL) == 0);
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));
		strcpy(mem, "first");
		strcpy(mem + SLOT, "second");
		for (i = 0; i < 2; i++) {
			struct ibv_sge s = { (uintptr_t)(mem + i * SLOT), SLOT, mr->lkey };
			struct ibv_send_wr w = { .wr_id = 100 + i, .sg_list = &s, .num_sge = 1,
						 .opcode = IBV_WR_SEND,
						 .send_flags = IBV_SEND_SIGNALED }, *bad;
			SETUP(ibv_post_send(id->qp, &w, &bad) == 0);
		}
		/* The server's Terminate ends the connection. */
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_DISCONNECTED));
		int got = 0;
		for (i = 0; i < 100 && got < 2; i++) {
			n = ibv_poll_cq(cq, 4 - got, wc + got);
			SETUP(n >= 0);
			got += n;
		}
		CHECK(got == 2);
		for (i = 0; i < got; i++) {
			CHECK(wc[i].wr_id == 100u + i);
			CHECK(wc[i].status == IBV_WC_SUCCESS || wc[i].status == IBV_WC_WR_FLUSH_ERR);
		}
		rdma_destroy_qp(id);
	}
	rdma_destroy_id(id);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	if (listen_id)
		rdma_destroy_id(listen_id);
	rdma_destroy_event_channel(ch);
	printf("%s: %s\n", role, fails ? "FAILED" : "ok");
	return fails ? 1 : 0;
}
