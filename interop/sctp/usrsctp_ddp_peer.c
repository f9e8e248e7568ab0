/*
 * An independent DDP-over-SCTP (RFC 5043) peer on usrsctp, for interop
 * with iwarp_datapath::over_sctp::SctpHost (tests/tests/usrsctp_interop.rs).
 *
 *   usrsctp_ddp_peer client ADDR PORT N [udp] [noadapt]
 *   usrsctp_ddp_peer server PORT N [udp] [noadapt]
 *
 * `noadapt` leaves the Adaptation Layer Indication out: a DDP peer must
 * refuse the association (RFC 5043 §7.1, §11.1). The client then expects
 * its connect to fail and prints "OK refused"; the server just waits for an
 * association that must never come (the test kills it).
 *
 * SCTP over raw IPv4, or with `udp` inside UDP (RFC 6951): usrsctp_init(9899)
 * and, for the client, SCTP_REMOTE_UDP_ENCAPS_PORT 9899 (the server answers
 * on the port an INIT came from). Both
 * roles offer the Adaptation Layer Indication 0x00000001 (SCTP_ADAPTATION_LAYER,
 * RFC 5061 / RFC 5043 §5.1), and fail unless the peer's indication arrives
 * with the same value. 4 streams in and out (RFC 5043 §8). Every message is
 * sent unordered on stream 0 (§10). The SCTP initiator also initiates the
 * DDP Stream Session:
 *
 *   initiator: Initiate(ssn 0) -> <- Accept(ssn 0); N segments each way
 *              (ssn 1..N, 1000 octets of a known pattern, checked);
 *              Terminate(ssn N+1) ->; graceful close.
 *   responder: <- Initiate; Accept ->; N segments each way; <- Terminate;
 *              waits for the peer's SHUTDOWN.
 *
 * Prints "OK ..." and exits 0 when every check held; otherwise prints
 * "FAIL ..." and exits 1. alarm(60) bounds the whole run.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <usrsctp.h>

#define PPID_SEGMENT 16
#define PPID_CONTROL 17
#define FC_INITIATE 1
#define FC_ACCEPT 2
#define FC_TERMINATE 4
#define SEG 1000
#define STREAMS 4

static int got_adaptation = 0;
static uint32_t adaptation_value = 0;

static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("FAIL ");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
	exit(1);
}

static void pattern(uint8_t *buf, int from, int i)
{
	for (int k = 0; k < SEG; k++)
		buf[k] = (uint8_t)k ^ (uint8_t)(i * 31) ^ (uint8_t)from;
}

static void setopt(struct socket *s, int opt, const void *v, socklen_t len, const char *what)
{
	if (usrsctp_setsockopt(s, IPPROTO_SCTP, opt, v, len) < 0)
		fail("setsockopt %s: %s", what, strerror(errno));
}

static void configure(struct socket *s, int adapt)
{
	if (adapt) {
		struct sctp_setadaptation ad = { .ssb_adaptation_ind = 1 };
		setopt(s, SCTP_ADAPTATION_LAYER, &ad, sizeof(ad), "SCTP_ADAPTATION_LAYER");
	}
	struct sctp_initmsg im = { .sinit_num_ostreams = STREAMS, .sinit_max_instreams = STREAMS };
	setopt(s, SCTP_INITMSG, &im, sizeof(im), "SCTP_INITMSG");
	int on = 1;
	setopt(s, SCTP_RECVRCVINFO, &on, sizeof(on), "SCTP_RECVRCVINFO");
	setopt(s, SCTP_NODELAY, &on, sizeof(on), "SCTP_NODELAY");
	uint16_t evs[] = { SCTP_ASSOC_CHANGE, SCTP_ADAPTATION_INDICATION, SCTP_SHUTDOWN_EVENT };
	for (unsigned i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
		struct sctp_event ev = { .se_assoc_id = SCTP_FUTURE_ASSOC, .se_type = evs[i], .se_on = 1 };
		setopt(s, SCTP_EVENT, &ev, sizeof(ev), "SCTP_EVENT");
	}
}

static void send_msg(struct socket *s, uint32_t ppid, const uint8_t *p, size_t len)
{
	struct sctp_sndinfo si = { .snd_sid = 0, .snd_flags = SCTP_UNORDERED, .snd_ppid = htonl(ppid) };
	for (int tries = 0; tries < 1000; tries++) {
		ssize_t n = usrsctp_sendv(s, p, len, NULL, 0, &si, sizeof(si), SCTP_SENDV_SNDINFO, 0);
		if (n == (ssize_t)len)
			return;
		if (n < 0 && (errno == EAGAIN || errno == ENOBUFS)) {
			usleep(1000);
			continue;
		}
		fail("sendv ppid %u: %zd %s", ppid, n, strerror(errno));
	}
	fail("sendv ppid %u: send buffer stays full", ppid);
}

static void send_control(struct socket *s, uint16_t ssn, uint16_t fc, const char *pd)
{
	uint8_t b[4 + 512];
	size_t pl = pd ? strlen(pd) : 0;
	b[0] = ssn >> 8, b[1] = ssn & 0xff, b[2] = fc >> 8, b[3] = fc & 0xff;
	memcpy(b + 4, pd ? pd : "", pl);
	send_msg(s, PPID_CONTROL, b, 4 + pl);
}

/* One data message: returns its length, fills ppid/sid/flags; 0 at EOF.
 * Notifications are handled here and not returned. */
static ssize_t recv_msg(struct socket *s, uint8_t *buf, size_t cap, uint32_t *ppid, uint16_t *flags)
{
	for (;;) {
		struct sctp_rcvinfo ri;
		socklen_t ril = sizeof(ri);
		unsigned int infotype = 0;
		int msgflags = 0;
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		ssize_t n = usrsctp_recvv(s, buf, cap, (struct sockaddr *)&from, &fl, &ri, &ril, &infotype, &msgflags);
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			return n;
		}
		if (msgflags & MSG_NOTIFICATION) {
			union sctp_notification *sn = (union sctp_notification *)buf;
			if (sn->sn_header.sn_type == SCTP_ADAPTATION_INDICATION) {
				got_adaptation = 1;
				adaptation_value = sn->sn_adaptation_event.sai_adaptation_ind;
				printf("adaptation indication from peer: 0x%08x\n", adaptation_value);
			} else if (sn->sn_header.sn_type == SCTP_ASSOC_CHANGE) {
				printf("assoc change: state %u error %u in %u out %u\n",
				       sn->sn_assoc_change.sac_state, sn->sn_assoc_change.sac_error,
				       sn->sn_assoc_change.sac_inbound_streams, sn->sn_assoc_change.sac_outbound_streams);
			} else if (sn->sn_header.sn_type == SCTP_SHUTDOWN_EVENT) {
				printf("peer shutdown\n");
			}
			continue;
		}
		if (!(msgflags & MSG_EOR))
			fail("message longer than %zu octets", cap);
		if (infotype != SCTP_RECVV_RCVINFO)
			fail("no rcvinfo with a message");
		if (ri.rcv_sid != 0)
			fail("message on stream %u", ri.rcv_sid);
		*ppid = ntohl(ri.rcv_ppid);
		*flags = ri.rcv_flags;
		return n;
	}
}

static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static void expect_control(struct socket *s, uint16_t ssn, uint16_t fc, const char *pd)
{
	uint8_t b[2048];
	uint32_t ppid;
	uint16_t flags;
	ssize_t n = recv_msg(s, b, sizeof(b), &ppid, &flags);
	if (n <= 0)
		fail("waiting for control fc %u: recv %zd", fc, n);
	if (ppid != PPID_CONTROL || n < 4)
		fail("expected control message fc %u, got ppid %u len %zd", fc, ppid, n);
	if (!(flags & SCTP_UNORDERED))
		fail("control message fc %u not unordered (RFC 5043 §10)", fc);
	if (be16(b) != ssn || be16(b + 2) != fc)
		fail("control: ssn %u fc %u, expected ssn %u fc %u", be16(b), be16(b + 2), ssn, fc);
	if (pd && ((size_t)n - 4 != strlen(pd) || memcmp(b + 4, pd, strlen(pd)) != 0))
		fail("control fc %u: private data %.*s", fc, (int)n - 4, (char *)b + 4);
	printf("got control fc %u ssn %u (%zd octets)\n", fc, ssn, n);
}

static void send_segments(struct socket *s, int n)
{
	uint8_t b[2 + SEG];
	for (int i = 0; i < n; i++) {
		uint16_t ssn = (uint16_t)(i + 1);
		b[0] = ssn >> 8, b[1] = ssn & 0xff;
		pattern(b + 2, 0xc, i);
		send_msg(s, PPID_SEGMENT, b, sizeof(b));
	}
	printf("sent %d segments\n", n);
}

static void receive_segments(struct socket *s, int n)
{
	uint8_t seen[65536] = { 0 };
	uint8_t b[4096], want[SEG];
	for (int got = 0; got < n;) {
		uint32_t ppid;
		uint16_t flags;
		ssize_t len = recv_msg(s, b, sizeof(b), &ppid, &flags);
		if (len <= 0)
			fail("after %d segments: recv %zd", got, len);
		if (ppid != PPID_SEGMENT)
			fail("expected a DDP segment (ppid 16), got ppid %u", ppid);
		if (!(flags & SCTP_UNORDERED))
			fail("segment not unordered (RFC 5043 §10)");
		if (len != 2 + SEG)
			fail("segment of %zd octets", len);
		uint16_t ssn = be16(b);
		if (ssn < 1 || ssn > n || seen[ssn])
			fail("segment DDP-SSN %u unexpected or repeated", ssn);
		seen[ssn] = 1;
		pattern(want, 0xa, ssn - 1);
		if (memcmp(b + 2, want, SEG) != 0)
			fail("segment DDP-SSN %u: wrong content", ssn);
		got++;
	}
	printf("received %d segments, contents checked\n", n);
}

int main(int argc, char **argv)
{
	alarm(60);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		fail("usage");
	int client = strcmp(argv[1], "client") == 0;
	int udp = 0, noadapt = 0, nargs = argc;
	for (; nargs > 2; nargs--) {
		if (strcmp(argv[nargs - 1], "udp") == 0)
			udp = 1;
		else if (strcmp(argv[nargs - 1], "noadapt") == 0)
			noadapt = 1;
		else
			break;
	}
	if ((client && nargs != 5) || (!client && nargs != 4))
		fail("usage: client ADDR PORT N [udp] | server PORT N [udp]");
	int n = atoi(argv[nargs - 1]);
	usrsctp_init(udp ? 9899 : 0, NULL, NULL);
	struct socket *s = usrsctp_socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP, NULL, NULL, 0, NULL);
	if (!s)
		fail("usrsctp_socket: %s", strerror(errno));
	configure(s, !noadapt);
	struct socket *c = s;
	if (client) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[3])) };
		if (inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1)
			fail("address %s", argv[2]);
		if (udp) {
			struct sctp_udpencaps ue;
			memset(&ue, 0, sizeof(ue));
			/* No address: the default for future associations. */
			ue.sue_assoc_id = SCTP_FUTURE_ASSOC;
			ue.sue_port = htons(9899);
			setopt(s, SCTP_REMOTE_UDP_ENCAPS_PORT, &ue, sizeof(ue), "SCTP_REMOTE_UDP_ENCAPS_PORT");
		}
		if (usrsctp_connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			if (noadapt) {
				printf("OK refused: connect: %s\n", strerror(errno));
				usrsctp_close(s);
				for (int i = 0; i < 100 && usrsctp_finish() != 0; i++)
					usleep(50000);
				return 0;
			}
			fail("connect: %s", strerror(errno));
		}
		if (noadapt)
			fail("associated without an adaptation indication");
		printf("associated\n");
		send_control(c, 0, FC_INITIATE, "from usrsctp");
		expect_control(c, 0, FC_ACCEPT, "welcome usrsctp");
		send_segments(c, n);
		receive_segments(c, n);
		if (!got_adaptation || adaptation_value != 1)
			fail("adaptation indication: got %d value 0x%08x", got_adaptation, adaptation_value);
		send_control(c, (uint16_t)(n + 1), FC_TERMINATE, NULL);
		/* Graceful: SHUTDOWN once the Terminate is acknowledged. */
		usrsctp_shutdown(c, SHUT_WR);
		uint8_t b[2048];
		uint32_t ppid;
		uint16_t flags;
		ssize_t r = recv_msg(c, b, sizeof(b), &ppid, &flags);
		if (r != 0)
			fail("expected the association to close, got %zd (ppid %u)", r, ppid);
	} else {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
		sa.sin_addr.s_addr = htonl(INADDR_ANY);
		if (usrsctp_bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			fail("bind: %s", strerror(errno));
		if (usrsctp_listen(s, 1) < 0)
			fail("listen: %s", strerror(errno));
		printf("listening\n");
		fflush(stdout);
		c = usrsctp_accept(s, NULL, NULL);
		if (!c)
			fail("accept: %s", strerror(errno));
		printf("accepted\n");
		expect_control(c, 0, FC_INITIATE, "from SctpHost");
		send_control(c, 0, FC_ACCEPT, "welcome SctpHost");
		receive_segments(c, n);
		send_segments(c, n);
		expect_control(c, (uint16_t)(n + 1), FC_TERMINATE, "");
		if (!got_adaptation || adaptation_value != 1)
			fail("adaptation indication: got %d value 0x%08x", got_adaptation, adaptation_value);
		uint8_t b[2048];
		uint32_t ppid;
		uint16_t flags;
		ssize_t r = recv_msg(c, b, sizeof(b), &ppid, &flags);
		if (r != 0)
			fail("expected the peer's SHUTDOWN, got %zd (ppid %u)", r, ppid);
	}
	printf("OK %s: adaptation 0x%08x, %d segments each way over %s\n", client ? "client" : "server",
	       adaptation_value, n, udp ? "UDP" : "raw IPv4");
	usrsctp_close(c);
	if (c != s)
		usrsctp_close(s);
	for (int i = 0; i < 100 && usrsctp_finish() != 0; i++)
		usleep(50000);
	return 0;
}
