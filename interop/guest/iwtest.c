/*
 * iwtest: a small rdma_cm program the interop suite builds on the host and
 * runs inside the siw guest (the guest has librdmacm and libibverbs, the
 * same Debian packages). It exercises RDMA Write, RDMA Read and Send of one
 * message size in both directions, with private data both ways, against
 * our stack, and checks every byte it receives.
 *
 *   iwtest server BIND_ADDR PORT SIZE PRIVATE_DATA
 *   iwtest client SERVER_ADDR PORT SIZE PRIVATE_DATA
 *
 * After the connection is up (the peer's private data printed as
 * "peer-pd: HEX"):
 *   1. we Send INFO(t) = {be64 addr, be32 rkey, be32 len} of buffer t,
 *      filled with pattern 1;
 *   2. the peer Reads t (checking pattern 1), Writes pattern 2 into t, and
 *      Sends SIZE octets of pattern 3; we check both ("A-ok");
 *   3. the peer Sends INFO(u) of its buffer u (pattern 4); we Read it
 *      (checking pattern 4), Write pattern 5 into it, Send SIZE octets of
 *      pattern 6;
 *   4. the peer Sends 16 octets DONE; we print "B-ok", disconnect, and
 *      print "PASS".
 * Any failure prints "FAIL ..." and exits 1.
 */
#include <endian.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

/* Must match interop/src/iwtest.rs. */
static uint8_t pat(int which, size_t i)
{
	return (uint8_t)((i * 131 + (size_t)which * 29 + (i >> 9)) % 251);
}

static void fail(const char *what)
{
	printf("FAIL %s\n", what);
	fflush(stdout);
	exit(1);
}

static void fill(uint8_t *b, size_t n, int which)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pat(which, i);
}

static void check(const uint8_t *b, size_t n, int which, const char *what)
{
	for (size_t i = 0; i < n; i++) {
		if (b[i] != pat(which, i)) {
			printf("FAIL %s: octet %zu is %u, expected %u\n", what, i,
			       b[i], pat(which, i));
			fflush(stdout);
			exit(1);
		}
	}
}

static void send_done(struct rdma_cm_id *id, const char *what)
{
	struct ibv_wc wc;

	if (rdma_get_send_comp(id, &wc) <= 0)
		fail(what);
	if (wc.status != IBV_WC_SUCCESS) {
		printf("FAIL %s: %s\n", what, ibv_wc_status_str(wc.status));
		exit(1);
	}
}

static struct ibv_wc recv_done(struct rdma_cm_id *id, const char *what)
{
	struct ibv_wc wc;

	if (rdma_get_recv_comp(id, &wc) <= 0)
		fail(what);
	if (wc.status != IBV_WC_SUCCESS) {
		printf("FAIL %s: %s\n", what, ibv_wc_status_str(wc.status));
		exit(1);
	}
	return wc;
}

static struct ibv_mr *reg(struct rdma_cm_id *id, void *b, size_t n, int access)
{
	struct ibv_mr *mr = ibv_reg_mr(id->pd, b, n, access);

	if (!mr)
		fail("ibv_reg_mr");
	return mr;
}

static void print_pd(const struct rdma_conn_param *p)
{
	const uint8_t *d = p->private_data;

	printf("peer-pd: ");
	for (int i = 0; d && i < p->private_data_len; i++)
		printf("%02x", d[i]);
	printf("\n");
}

int main(int argc, char **argv)
{
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr attr;
	struct rdma_conn_param param;
	struct rdma_cm_id *listen_id = NULL, *id;
	int server;
	size_t size;
	const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
		       IBV_ACCESS_REMOTE_WRITE;

	if (argc != 6)
		fail("usage: iwtest server|client ADDR PORT SIZE PRIVATE_DATA");
	server = !strcmp(argv[1], "server");
	size = strtoul(argv[4], NULL, 0);
	if (size == 0 || size > (64u << 20))
		fail("size");

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	if (server)
		hints.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(argv[2], argv[3], &hints, &res))
		fail("rdma_getaddrinfo");

	memset(&attr, 0, sizeof(attr));
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 8;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 1;

	if (server) {
		if (rdma_create_ep(&listen_id, res, NULL, &attr))
			fail("rdma_create_ep (listen)");
		if (rdma_listen(listen_id, 1))
			fail("rdma_listen");
		printf("listening\n");
		fflush(stdout);
		if (rdma_get_request(listen_id, &id))
			fail("rdma_get_request");
		print_pd(&id->event->param.conn);
	} else {
		if (rdma_create_ep(&id, res, NULL, &attr))
			fail("rdma_create_ep");
	}
	if (!id->qp)
		fail("no QP");

	uint8_t *t = malloc(size), *rbig = malloc(size), *u = malloc(size);
	uint8_t *q5 = malloc(size), *q6 = malloc(size);
	uint8_t sinfo[16], rinfo[16], rdone[16];

	if (!t || !rbig || !u || !q5 || !q6)
		fail("malloc");
	fill(t, size, 1);
	fill(q5, size, 5);
	fill(q6, size, 6);
	memset(rbig, 0, size);
	memset(u, 0, size);
	struct ibv_mr *mt = reg(id, t, size, rw);
	struct ibv_mr *mrbig = reg(id, rbig, size, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mu = reg(id, u, size, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mq5 = reg(id, q5, size, 0);
	struct ibv_mr *mq6 = reg(id, q6, size, 0);
	struct ibv_mr *msinfo = reg(id, sinfo, 16, 0);
	struct ibv_mr *mrinfo = reg(id, rinfo, 16, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mrdone = reg(id, rdone, 16, IBV_ACCESS_LOCAL_WRITE);

	/* The peer's three messages, in the order they come. */
	if (rdma_post_recv(id, NULL, rbig, size, mrbig) ||
	    rdma_post_recv(id, NULL, rinfo, 16, mrinfo) ||
	    rdma_post_recv(id, NULL, rdone, 16, mrdone))
		fail("rdma_post_recv");

	memset(&param, 0, sizeof(param));
	param.private_data = argv[5];
	param.private_data_len = (uint8_t)strlen(argv[5]);
	param.responder_resources = 4;
	param.initiator_depth = 4;
	param.retry_count = 7;
	if (server) {
		if (rdma_accept(id, &param))
			fail("rdma_accept");
	} else {
		if (rdma_connect(id, &param))
			fail("rdma_connect");
		print_pd(&id->event->param.conn);
	}
	printf("connected\n");
	fflush(stdout);

	/* 1. INFO(t). */
	uint64_t a = htobe64((uint64_t)(uintptr_t)t);
	uint32_t k = htobe32(mt->rkey), l = htobe32((uint32_t)size);
	memcpy(sinfo, &a, 8);
	memcpy(sinfo + 8, &k, 4);
	memcpy(sinfo + 12, &l, 4);
	if (rdma_post_send(id, NULL, sinfo, 16, msinfo, 0))
		fail("post INFO(t)");
	send_done(id, "send INFO(t)");

	/* 2. The peer Read t, Wrote pattern 2 into it, Sent pattern 3. */
	struct ibv_wc wc = recv_done(id, "receive pattern 3");
	if (wc.byte_len != size)
		fail("pattern 3 length");
	check(rbig, size, 3, "Send from the peer");
	check(t, size, 2, "Write from the peer");
	printf("A-ok\n");
	fflush(stdout);

	/* 3. INFO(u) from the peer: Read, Write, Send. */
	wc = recv_done(id, "receive INFO(u)");
	if (wc.byte_len != 16)
		fail("INFO(u) length");
	memcpy(&a, rinfo, 8);
	memcpy(&k, rinfo + 8, 4);
	memcpy(&l, rinfo + 12, 4);
	if (be32toh(l) != size)
		fail("INFO(u) size");
	if (rdma_post_read(id, NULL, u, size, mu, 0, be64toh(a), be32toh(k)))
		fail("post Read");
	send_done(id, "Read");
	check(u, size, 4, "Read from the peer");
	if (rdma_post_write(id, NULL, q5, size, mq5, 0, be64toh(a), be32toh(k)))
		fail("post Write");
	send_done(id, "Write");
	if (rdma_post_send(id, NULL, q6, size, mq6, 0))
		fail("post Send");
	send_done(id, "Send");

	/* 4. DONE. */
	wc = recv_done(id, "receive DONE");
	if (wc.byte_len != 16 || memcmp(rdone, "iwtest-done-ok!!", 16))
		fail("DONE");
	printf("B-ok\n");
	fflush(stdout);
	rdma_disconnect(id);
	printf("PASS\n");
	fflush(stdout);
	return 0;
}
