/*
 * The C side of iwarp-dpdk: the only DPDK calls the Rust crate makes.
 *
 * This header is the binding. The Rust `extern "C"` block in src/sys.rs
 * declares exactly these functions with the same types; change both together.
 *
 * Why a shim: the hot-path calls (rte_eth_rx_burst, rte_eth_tx_burst,
 * rte_pktmbuf_alloc, rte_pktmbuf_mtod, ...) are `static inline` in DPDK's
 * headers and have no symbol to link against, and port configuration takes
 * large, version-dependent structs (rte_eth_conf, rte_eth_dev_info). Here they
 * become 28 functions over integers, byte pointers and two opaque handles.
 *
 * Conventions: functions returning int return 0 on success and a negative
 * errno value on failure (DPDK's own convention); pointers returned NULL
 * mean failure with the reason in shim_errno().
 */
#ifndef IWARP_DPDK_SHIM_H
#define IWARP_DPDK_SHIM_H

#include <stddef.h>
#include <stdint.h>

struct rte_mempool;
struct rte_mbuf;

/* rte_eal_init. Returns the number of arguments parsed or -errno. */
int shim_eal_init(int argc, char **argv);
/* rte_eal_cleanup. */
int shim_eal_cleanup(void);
/* rte_errno of the calling thread. */
int shim_errno(void);

/* A packet mbuf pool (rte_pktmbuf_pool_create) on the caller's socket. */
struct rte_mempool *shim_pool_create(const char *name, uint32_t n, uint32_t cache,
                                     uint16_t data_room);
void shim_pool_free(struct rte_mempool *pool);
/* Mbufs currently free in the pool (rte_mempool_avail_count). */
uint32_t shim_pool_avail(const struct rte_mempool *pool);
/* The calling thread's lcore id, registering it as a non-EAL lcore
 * (rte_thread_register) if it has none, so that mempools with a cache
 * give it a cache of its own (*registered is then 1, else 0); -errno if it
 * has none and cannot get one (every lcore id taken, or a secondary
 * process). */
int shim_thread_lcore(int *registered);
/* Release the calling thread's lcore id (rte_thread_unregister). */
void shim_thread_unregister(void);
/* The calling thread's lcore id (rte_lcore_id), -1 if it has none. */
int shim_lcore_id(void);

/* Hot-plug a device from a devargs string ("net_af_packet0,iface=veth0"). */
int shim_dev_probe(const char *devargs);
/* rte_eth_dev_get_port_by_name. */
int shim_port_by_name(const char *name, uint16_t *port);
/* The port's driver name (`net_memif`), NUL-terminated in `buf`. */
int shim_port_driver(uint16_t port, char *buf, size_t len);
/* The MTUs the driver accepts and the longest frame it receives
 * (rte_eth_dev_info_get). */
int shim_port_limits(uint16_t port, uint16_t *min_mtu, uint16_t *max_mtu,
                     uint32_t *max_rx_pktlen);
/*
 * The driver's queue limits and RSS: its max_rx_queues and max_tx_queues,
 * which of the hash types RTE_ETH_RSS_IPV4 | RTE_ETH_RSS_NONFRAG_IPV4_TCP
 * it offers (flow_type_rss_offloads masked with them; 0: no RSS for IPv4
 * and TCP) and the length of its hash key (hash_key_size; 0 if it does
 * not say).
 */
int shim_port_queue_limits(uint16_t port, uint16_t *max_rx_queues, uint16_t *max_tx_queues,
                           uint64_t *rss_hf, uint8_t *hash_key_size);
/*
 * Configure the port with MTU mtu and nb_queues RX and nb_queues TX queues,
 * each with nb_rxd/nb_txd descriptors (RX buffers from pool, whose data
 * room must hold a whole frame: no RX scatter is asked for), start the
 * port. rss_hf not 0: RX multi-queue mode RTE_ETH_MQ_RX_RSS hashing those
 * types, with the rss_key_len octets at rss_key as the key (NULL: the
 * driver's own); ethdev keeps the pointer in the port's configuration, so
 * the key must stay valid until the port is closed. The key is also set
 * with rte_eth_dev_rss_hash_update once started, for drivers that take it
 * only that way (net_null); a driver without that operation (-ENOTSUP) is
 * left with what it took from the configuration.
 * Returns 0 or -errno.
 */
int shim_port_init(uint16_t port, struct rte_mempool *pool, uint16_t nb_queues, uint16_t nb_rxd,
                   uint16_t nb_txd, uint16_t mtu, uint64_t rss_hf, const uint8_t *rss_key,
                   uint8_t rss_key_len);
/*
 * The RSS hash configuration the driver reports (rte_eth_dev_rss_hash_conf_get):
 * up to cap octets of its key into key (*key_len: how many it has, 0 if it
 * returned none) and the hash types in *rss_hf. 0 or -errno (-ENOTSUP: the
 * driver cannot say).
 */
int shim_port_rss_conf(uint16_t port, uint8_t *key, uint8_t cap, uint8_t *key_len,
                       uint64_t *rss_hf);
int shim_port_mac(uint16_t port, uint8_t mac[6]);
int shim_port_mtu(uint16_t port, uint16_t *mtu);
/* rte_eth_stats_get, flattened. */
int shim_port_stats(uint16_t port, uint64_t *ipackets, uint64_t *opackets, uint64_t *imissed,
                    uint64_t *ierrors, uint64_t *oerrors, uint64_t *rx_nombuf);
/* 1 if the port's link is up, 0 if down, negative errno on failure
 * (rte_eth_link_get_nowait). */
int shim_port_link_up(uint16_t port);
/* rte_eth_dev_stop then rte_eth_dev_close (which releases the port); with
 * remove not 0, then rte_dev_remove of its device (a hot-plugged one is
 * unplugged, so that its devargs probe it again). */
int shim_port_close(uint16_t port, int remove);

/* rte_eth_rx_burst / rte_eth_tx_burst on queue `queue`. */
uint16_t shim_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t shim_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
/* RTE_ETH_RSS_IPV4, RTE_ETH_RSS_NONFRAG_IPV4_TCP and
 * RTE_ETH_RSS_NONFRAG_IPV4_SCTP, the hash types asked for. */
uint64_t shim_rss_hf_ipv4(void);
uint64_t shim_rss_hf_ipv4_tcp(void);
uint64_t shim_rss_hf_ipv4_sctp(void);

/*
 * The first segment's data: pointer, its length, and the whole packet's
 * length (larger when the packet is chained over several segments).
 */
const uint8_t *shim_mbuf_data(const struct rte_mbuf *m, uint16_t *seg_len, uint32_t *pkt_len);
/* Copy the whole packet (all segments) into buf; returns octets copied or 0. */
uint32_t shim_mbuf_copy(const struct rte_mbuf *m, uint8_t *buf, uint32_t cap);
/* One piece of a frame gathered into an mbuf. */
struct shim_part {
    const uint8_t *data;
    uint32_t len;
};
/* Allocate an mbuf from pool holding the frame given as n parts, copied in
 * order straight into it (one copy, no joining first); NULL if the pool is
 * empty or the frame exceeds one segment's room. */
struct rte_mbuf *shim_mbuf_from_parts(struct rte_mempool *pool, const struct shim_part *parts,
                                      uint32_t n);
/* Allocate an mbuf from pool with len octets of data appended (holding
 * whatever the mbuf held before) for a frame built in place: the data pointer, the mbuf in
 * *out; NULL (and *out NULL) if the pool is empty or len exceeds one
 * segment's room. */
uint8_t *shim_mbuf_alloc_len(struct rte_mempool *pool, uint16_t len, struct rte_mbuf **out);
/* Remove the last `len` octets of a one-segment mbuf's data; 0, or -1 if
 * it holds fewer. */
int shim_mbuf_trim(struct rte_mbuf *m, uint16_t len);
/* rte_pktmbuf_free_bulk. */
void shim_mbuf_free_bulk(struct rte_mbuf **pkts, uint32_t n);

#endif
