/* A connected CM id stays quiet: after ESTABLISHED, no event comes on the
 * channel for 500 ms while both ends stay connected (the CM once reported
 * DISCONNECTED whenever its 100 ms watch of a live connection timed out).
 * Usage: cm_quiet server ADDR PORT | cm_quiet client ADDR PORT.
 * Exit 0: quiet; 1: an event came; 2: setup failed. */

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static struct rdma_cm_event *next(struct rdma_event_channel *ch, int want)
{
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e)) {
		perror("rdma_get_cm_event");
		exit(2);
	}
	if (e->event != want) {
		fprintf(stderr, "got %s, wanted %s\n", rdma_event_str(e->event), rdma_event_str(want));
		exit(2);
	}
	return e;
}

static int quiet(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	int n = poll(&p, 1, ms);
	if (n > 0) {
		struct rdma_cm_event *e;
		rdma_get_cm_event(ch, &e);
		fprintf(stderr, "unexpected %s while connected\n", rdma_event_str(e->event));
		return 0;
	}
	return 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct ibv_qp_init_attr qa = { .cap = { 4, 4, 1, 1, 0 }, .qp_type = IBV_QPT_RC };
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id, *conn;
	struct rdma_cm_event *e;
	int ok;

	if (argc != 4 || !ch)
		return 2;
	inet_pton(AF_INET, argv[2], &a.sin_addr);
	a.sin_port = htons(atoi(argv[3]));
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return 2;
	if (!strcmp(argv[1], "server")) {
		if (rdma_bind_addr(id, (struct sockaddr *)&a) || rdma_listen(id, 1))
			return 2;
		e = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
		conn = e->id;
		rdma_ack_cm_event(e);
		if (rdma_create_qp(conn, NULL, &qa) || rdma_accept(conn, NULL))
			return 2;
	} else {
		conn = id;
		if (rdma_resolve_addr(conn, NULL, (struct sockaddr *)&a, 2000))
			return 2;
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
		if (rdma_resolve_route(conn, 2000))
			return 2;
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
		if (rdma_create_qp(conn, NULL, &qa) || rdma_connect(conn, NULL))
			return 2;
	}
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));
	/* Neither end disconnects during the windows, so they see only
	 * what the CM makes up. A process that leaves closes what it left
	 * open (exit_open.c): the server stays 1 s past its window and the
	 * client 200 ms, so that neither's close falls in the other's
	 * window. */
	ok = quiet(ch, 500);
	printf("%s: %s\n", argv[1], ok ? "quiet" : "NOT quiet");
	fflush(stdout);
	usleep(strcmp(argv[1], "server") ? 200 * 1000 : 1000 * 1000);
	return ok ? 0 : 1;
}
