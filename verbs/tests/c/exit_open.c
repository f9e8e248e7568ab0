/* A process that ends with its connection open closes it: the server
 * accepts, waits a little and returns from main without rdma_disconnect
 * or destroying anything (Debian's ib_atomic_lat server destroys its CM
 * ids and leaves); the client must then see DISCONNECTED, as with a
 * kernel RNIC, which closes an exiting process's QPs. Our stack lives in
 * the process: without the exit hook closing it, the connection ended
 * with the process without a FIN and the client waited for ever (in
 * perftest, until its own FIN's retransmissions gave up, ~40 s).
 * Usage: exit_open server ADDR PORT | exit_open client ADDR PORT.
 * Exit 0: as expected; 1: no DISCONNECTED within 5 s; 2: setup failed. */

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

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct ibv_qp_init_attr qa = { .cap = { 4, 4, 1, 1, 0 }, .qp_type = IBV_QPT_RC };
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id, *conn;
	struct rdma_cm_event *e;
	struct pollfd p;

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
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));
		usleep(200 * 1000);
		printf("server: leaving with the connection open\n");
		return 0;
	}
	conn = id;
	if (rdma_resolve_addr(conn, NULL, (struct sockaddr *)&a, 2000))
		return 2;
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(conn, 2000))
		return 2;
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	if (rdma_create_qp(conn, NULL, &qa) || rdma_connect(conn, NULL))
		return 2;
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));
	p.fd = ch->fd;
	p.events = POLLIN;
	if (poll(&p, 1, 5000) != 1) {
		printf("client: no DISCONNECTED within 5 s of the server leaving\n");
		return 1;
	}
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_DISCONNECTED));
	printf("client: disconnected\n");
	rdma_disconnect(conn);
	return 0;
}
