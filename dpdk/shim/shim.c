/* See shim.h. Every function is a thin wrapper; no state lives here. */
#include "shim.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

int shim_eal_init(int argc, char **argv) {
    int rc = rte_eal_init(argc, argv);
    return rc < 0 ? -rte_errno : rc;
}

int shim_eal_cleanup(void) { return rte_eal_cleanup(); }

int shim_errno(void) { return rte_errno; }

struct rte_mempool *shim_pool_create(const char *name, uint32_t n, uint32_t cache,
                                     uint16_t data_room) {
    return rte_pktmbuf_pool_create(name, n, cache, 0, data_room, (int)rte_socket_id());
}

void shim_pool_free(struct rte_mempool *pool) { rte_mempool_free(pool); }

uint32_t shim_pool_avail(const struct rte_mempool *pool) {
    return rte_mempool_avail_count(pool);
}

int shim_thread_lcore(int *registered) {
    *registered = 0;
    if (rte_lcore_id() != LCORE_ID_ANY)
        return (int)rte_lcore_id();
    if (rte_thread_register() != 0)
        return -rte_errno;
    if (rte_lcore_id() == LCORE_ID_ANY)
        return -EBUSY;
    *registered = 1;
    return (int)rte_lcore_id();
}

void shim_thread_unregister(void) { rte_thread_unregister(); }

int shim_lcore_id(void) { return rte_lcore_id() == LCORE_ID_ANY ? -1 : (int)rte_lcore_id(); }

int shim_dev_probe(const char *devargs) { return rte_dev_probe(devargs); }

int shim_port_by_name(const char *name, uint16_t *port) {
    return rte_eth_dev_get_port_by_name(name, port);
}

/* The driver's info for a valid port: 0 or -errno. */
static int port_info(uint16_t port, struct rte_eth_dev_info *info) {
    if (!rte_eth_dev_is_valid_port(port))
        return -ENODEV;
    return rte_eth_dev_info_get(port, info);
}

int shim_port_limits(uint16_t port, uint16_t *min_mtu, uint16_t *max_mtu,
                     uint32_t *max_rx_pktlen) {
    struct rte_eth_dev_info info;
    int rc = port_info(port, &info);

    if (rc != 0)
        return rc;
    *min_mtu = info.min_mtu;
    *max_mtu = info.max_mtu;
    *max_rx_pktlen = info.max_rx_pktlen;
    return 0;
}

int shim_port_driver(uint16_t port, char *buf, size_t len) {
    struct rte_eth_dev_info info;
    int rc = port_info(port, &info);

    if (rc != 0)
        return rc;
    if (len == 0 || info.driver_name == NULL)
        return -EINVAL;
    snprintf(buf, len, "%s", info.driver_name);
    return 0;
}

/* The hash types this crate asks for: IPv4, TCP over IPv4 and SCTP over
 * IPv4 (whose ports sit where TCP's do); each only where the driver offers
 * it (shim_port_queue_limits masks with its flow_type_rss_offloads). */
#define SHIM_RSS_HF                                                                                \
    (RTE_ETH_RSS_IPV4 | RTE_ETH_RSS_NONFRAG_IPV4_TCP | RTE_ETH_RSS_NONFRAG_IPV4_SCTP)

uint64_t shim_rss_hf_ipv4(void) { return RTE_ETH_RSS_IPV4; }

uint64_t shim_rss_hf_ipv4_tcp(void) { return RTE_ETH_RSS_NONFRAG_IPV4_TCP; }

uint64_t shim_rss_hf_ipv4_sctp(void) { return RTE_ETH_RSS_NONFRAG_IPV4_SCTP; }

int shim_port_queue_limits(uint16_t port, uint16_t *max_rx_queues, uint16_t *max_tx_queues,
                           uint64_t *rss_hf, uint8_t *hash_key_size) {
    struct rte_eth_dev_info info;
    int rc = port_info(port, &info);

    if (rc != 0)
        return rc;
    *max_rx_queues = info.max_rx_queues;
    *max_tx_queues = info.max_tx_queues;
    *rss_hf = info.flow_type_rss_offloads & SHIM_RSS_HF;
    *hash_key_size = info.hash_key_size;
    return 0;
}

int shim_port_init(uint16_t port, struct rte_mempool *pool, uint16_t nb_queues, uint16_t nb_rxd,
                   uint16_t nb_txd, uint16_t mtu, uint64_t rss_hf, const uint8_t *rss_key,
                   uint8_t rss_key_len) {
    struct rte_eth_conf conf;
    struct rte_eth_dev_info info;
    int rc = port_info(port, &info);

    if (rc != 0)
        return rc;
    if (nb_queues == 0)
        return -EINVAL;
    memset(&conf, 0, sizeof(conf));
    /* rte_eth_dev_configure checks it against the driver's min/max MTU. */
    conf.rxmode.mtu = mtu;
    if (rss_hf != 0) {
        conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
        /* ethdev copies the struct, pointer and all: the caller keeps the
         * key alive until the port is closed. */
        conf.rx_adv_conf.rss_conf.rss_key = (uint8_t *)(uintptr_t)rss_key;
        conf.rx_adv_conf.rss_conf.rss_key_len = rss_key != NULL ? rss_key_len : 0;
        conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
    }
    /* Fast free: every mbuf we send comes from one pool and has refcnt 1. */
    if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE)
        conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
    rc = rte_eth_dev_configure(port, nb_queues, nb_queues, &conf);
    if (rc != 0)
        return rc;
    rc = rte_eth_dev_adjust_nb_rx_tx_desc(port, &nb_rxd, &nb_txd);
    if (rc != 0)
        return rc;
    for (uint16_t q = 0; q < nb_queues; q++) {
        rc = rte_eth_rx_queue_setup(port, q, nb_rxd, (unsigned)rte_eth_dev_socket_id(port), NULL,
                                    pool);
        if (rc != 0)
            return rc;
        rc = rte_eth_tx_queue_setup(port, q, nb_txd, (unsigned)rte_eth_dev_socket_id(port),
                                    NULL);
        if (rc != 0)
            return rc;
    }
    rc = rte_eth_dev_start(port);
    if (rc != 0)
        return rc;
    if (rss_hf != 0 && rss_key != NULL) {
        struct rte_eth_rss_conf rss;
        memset(&rss, 0, sizeof(rss));
        rss.rss_key = (uint8_t *)(uintptr_t)rss_key;
        rss.rss_key_len = rss_key_len;
        rss.rss_hf = rss_hf;
        rc = rte_eth_dev_rss_hash_update(port, &rss);
        if (rc != 0 && rc != -ENOTSUP)
            return rc; /* the caller closes the port */
    }
    return 0;
}

int shim_port_rss_conf(uint16_t port, uint8_t *key, uint8_t cap, uint8_t *key_len,
                       uint64_t *rss_hf) {
    struct rte_eth_dev_info info;
    uint8_t buf[256];
    struct rte_eth_rss_conf rss;
    int rc = port_info(port, &info);

    if (rc != 0)
        return rc;
    memset(&rss, 0, sizeof(rss));
    memset(buf, 0, sizeof(buf));
    /* The driver writes its key into buf (hash_key_size octets, at most
     * 255); one that does not say how long its key is (hash_key_size 0,
     * as net_null) writes the usual 40-octet Toeplitz key, unless it
     * sets rss_key_len itself. */
    rss.rss_key = buf;
    rss.rss_key_len = info.hash_key_size != 0 ? info.hash_key_size : 40;
    rc = rte_eth_dev_rss_hash_conf_get(port, &rss);
    if (rc != 0)
        return rc;
    *key_len = rss.rss_key_len < cap ? rss.rss_key_len : cap;
    memcpy(key, buf, *key_len);
    *rss_hf = rss.rss_hf;
    return 0;
}

int shim_port_mac(uint16_t port, uint8_t mac[6]) {
    struct rte_ether_addr a;
    int rc = rte_eth_macaddr_get(port, &a);
    if (rc == 0)
        memcpy(mac, a.addr_bytes, 6);
    return rc;
}

int shim_port_mtu(uint16_t port, uint16_t *mtu) { return rte_eth_dev_get_mtu(port, mtu); }

int shim_port_stats(uint16_t port, uint64_t *ipackets, uint64_t *opackets, uint64_t *imissed,
                    uint64_t *ierrors, uint64_t *oerrors, uint64_t *rx_nombuf) {
    struct rte_eth_stats s;
    int rc = rte_eth_stats_get(port, &s);
    if (rc != 0)
        return rc;
    *ipackets = s.ipackets;
    *opackets = s.opackets;
    *imissed = s.imissed;
    *ierrors = s.ierrors;
    *oerrors = s.oerrors;
    *rx_nombuf = s.rx_nombuf;
    return 0;
}

int shim_port_link_up(uint16_t port) {
    struct rte_eth_link link;
    memset(&link, 0, sizeof(link));
    int rc = rte_eth_link_get_nowait(port, &link);
    if (rc != 0)
        return rc;
    return link.link_status == RTE_ETH_LINK_UP ? 1 : 0;
}

int shim_port_close(uint16_t port, int remove) {
    struct rte_eth_dev_info info;
    struct rte_device *dev = NULL;

    /* The device outlives the port's release by close (the bus owns it). */
    if (remove && port_info(port, &info) == 0)
        dev = info.device;
    int stop = rte_eth_dev_stop(port);
    int close = rte_eth_dev_close(port);
    int rm = dev != NULL ? rte_dev_remove(dev) : 0;
    return stop != 0 ? stop : close != 0 ? close : rm;
}

uint16_t shim_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n) {
    return rte_eth_rx_burst(port, queue, pkts, n);
}

uint16_t shim_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n) {
    return rte_eth_tx_burst(port, queue, pkts, n);
}

const uint8_t *shim_mbuf_data(const struct rte_mbuf *m, uint16_t *seg_len, uint32_t *pkt_len) {
    *seg_len = m->data_len;
    *pkt_len = m->pkt_len;
    return rte_pktmbuf_mtod(m, const uint8_t *);
}

uint32_t shim_mbuf_copy(const struct rte_mbuf *m, uint8_t *buf, uint32_t cap) {
    uint32_t len = m->pkt_len;
    if (len > cap)
        return 0;
    const void *p = rte_pktmbuf_read(m, 0, len, buf);
    if (p == NULL)
        return 0;
    if (p != buf)
        memcpy(buf, p, len);
    return len;
}

struct rte_mbuf *shim_mbuf_from_parts(struct rte_mempool *pool, const struct shim_part *parts,
                                      uint32_t n) {
    uint32_t len = 0;
    for (uint32_t i = 0; i < n; i++) {
        len += parts[i].len;
        if (len > UINT16_MAX) {
            rte_errno = EMSGSIZE;
            return NULL;
        }
    }
    struct rte_mbuf *m = rte_pktmbuf_alloc(pool);
    if (m == NULL) {
        rte_errno = ENOBUFS;
        return NULL;
    }
    char *dst = rte_pktmbuf_append(m, (uint16_t)len);
    if (dst == NULL) {
        rte_pktmbuf_free(m);
        rte_errno = EMSGSIZE;
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
        memcpy(dst, parts[i].data, parts[i].len);
        dst += parts[i].len;
    }
    return m;
}

uint8_t *shim_mbuf_alloc_len(struct rte_mempool *pool, uint16_t len, struct rte_mbuf **out) {
    *out = NULL;
    struct rte_mbuf *m = rte_pktmbuf_alloc(pool);
    if (m == NULL) {
        rte_errno = ENOBUFS;
        return NULL;
    }
    char *dst = rte_pktmbuf_append(m, len);
    if (dst == NULL) {
        rte_pktmbuf_free(m);
        rte_errno = EMSGSIZE;
        return NULL;
    }
    *out = m;
    return (uint8_t *)dst;
}

int shim_mbuf_trim(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_trim(m, len); }

void shim_mbuf_free_bulk(struct rte_mbuf **pkts, uint32_t n) { rte_pktmbuf_free_bulk(pkts, n); }
