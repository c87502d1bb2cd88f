/*
 * mrcnic's declaration of the OCP MRC application API (mrc.h), written from
 * the published interface. Implemented by lib_mrc.so.
 *
 * Conventions: functions returning int give 0 on success and -1 with errno
 * set on failure unless noted; constructors return NULL on failure. Calls
 * named after a verbs call (ibv_poll_cq, ibv_post_send, ...) behave like it.
 */

#ifndef MRCNIC_MRC_H
#define MRCNIC_MRC_H

#include <stdint.h>
#include <infiniband/verbs.h>

#include <mrc_api_ver.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Size of every opaque vendor_cfg byte array in this header. */
#define MRC_MAX_VENDOR_CFG_SIZE 128

/*
 * Wire protocol versions, one bit each. A device reports the set it speaks
 * as a bitmap; a QP asks for exactly one, or 0 to let the provider pick.
 */
enum mrc_protocol_version {
	MRC_PROTOCOL_VERSION_0	= 0,		/* provider's choice */
	MRC_PROTOCOL_VERSION_1	= 1 << 0,
};

/* Opaque handles owned by the library. */
struct mrc_context;
struct mrc_qp_hint;
struct mrc_qp;
struct mrc_cq;
struct mrc_comp_channel;

/* Bits of mrc_device_attr.cap. */
enum mrc_device_cap {
	MRC_DEVICE_CAP_TRIM_NACK	= 1 << 0,	/* emits trim NACKs */
	MRC_DEVICE_CAP_DYNAMIC_MPR	= 1 << 1,	/* dynamic MPR */
	MRC_DEVICE_CAP_SVC_TIME		= 1 << 2,	/* responder service time */
};

/* What the device offers for MRC; filled by mrc_query_device{,_ex}(). */
struct mrc_device_attr {
	/* Bitmap of enum mrc_protocol_version values spoken. */
	uint32_t mrc_protocol_version;

	struct {
		uint16_t max_wimm;	/* ceiling when sending */
		uint16_t max_wimm_dest;	/* ceiling when receiving */
	} wimm_attr;

	/* Both in units of 128 PSNs. */
	struct {
		uint8_t max_mpr;	/* largest MPR, either role */
		uint8_t mpr_resolution;	/* allocation step */
	} mpr_attr;

	struct {
		uint32_t max_qp_hint;	/* QP hint objects available */
	} qp_attr;

	/* Bitmap of enum mrc_device_cap. */
	uint32_t cap;
};

/*
 * Report MRC attributes of a verbs device; *supported is set to 0 if the
 * device cannot do MRC. The _ex form also takes the MRC context and is the
 * one to use from API 1.0.1 on; the plain form gets 1.0.0 behaviour.
 */
#if MRC_API_VER_USED >= MRC_API_VER(1, 0, 1)
int mrc_query_device_ex(struct ibv_context *context,
			struct mrc_context *mcontext,
			struct mrc_device_attr *attr,
			int *supported);
#endif
int mrc_query_device(struct ibv_context *context,
		     struct mrc_device_attr *attr,
		     int *supported);

/*
 * Report the range of API versions (and vendor API versions) the library
 * implements, packed with MRC_API_VER(). Needs no context.
 */
void mrc_query_version(uint32_t *current_version,
		       uint32_t *last_supported_version,
		       uint32_t *vendor_version,
		       uint32_t *last_supported_vendor_version);

/*
 * Versions the program was built against, normally MRC_API_VER_USED and
 * MRC_VENDOR_API_VER_USED. A zero field means "not stated"; the provider
 * then assumes a version of its own choosing.
 */
struct mrc_context_attr {
	uint32_t mrc_api_version_used;
	uint32_t mrc_vendor_api_version_used;
};

/*
 * Open one instance of the library on a verbs device. Every other object
 * hangs off the context, and several independent users may each hold one.
 * context_attr may be NULL.
 */
struct mrc_context *mrc_create_context(struct ibv_context *vcontext,
				       struct mrc_context_attr *context_attr);

/* Release a context. EBUSY while channels, CQs, QPs or QP hints created
 * through it remain. */
int mrc_destroy_context(struct mrc_context *mrc_ctx);

/* Completion channels, as ibv_create/destroy_comp_channel(). The fd can be
 * handed to poll()/epoll. */
int mrc_create_comp_channel(struct mrc_context *mrc_ctx,
			    struct mrc_comp_channel **channel);
int mrc_get_comp_channel_fd(struct mrc_comp_channel *channel,
			    int *fd);
int mrc_destroy_comp_channel(struct mrc_comp_channel *channel);

/* Completion queues, as ibv_create_cq()/ibv_poll_cq()/ibv_destroy_cq().
 * mrc_poll_cq() returns the number of entries written (fewer than
 * num_entries means the CQ is now empty) or -1. */
struct mrc_cq *mrc_create_cq(struct mrc_context *mrc_ctx,
			     int cqe,
			     void *cq_context,
			     struct mrc_comp_channel *channel,
			     int comp_vector);
int mrc_poll_cq(struct mrc_cq *cq,
		int num_entries,
		struct ibv_wc *wc);
int mrc_destroy_cq(struct mrc_cq *cq);

/*
 * Expected traffic shape for the QPs that share a hint, letting the provider
 * size its resources. "Peer" means a destination IP address.
 */
struct mrc_qp_hint_attr {
	/* QPs with this hint sending to one peer at the same time. */
	int num_qps_per_peer;
	/* Peers that QPs with this hint send to at the same time. */
	int num_send_peers;
	/* Remote QPs converging on the same peer (incast at the target). */
	int num_remote_recv_peers;
	/* Provider-defined bytes. */
	uint8_t vendor_cfg[MRC_MAX_VENDOR_CFG_SIZE];
};

/* Selects mrc_qp_hint_attr fields in query/modify calls. */
enum mrc_qp_hint_attr_mask {
	MRC_QP_HINT_NUM_QPS_PER_PEER		= 1 << 0,
	MRC_QP_HINT_NUM_SEND_PEERS		= 1 << 1,
	MRC_QP_HINT_NUM_REMOTE_RECV_PEERS	= 1 << 2,
	MRC_QP_HINT_VENDOR_CFG			= 1 << 31
};

struct mrc_qp_hint_init_attr {
	struct mrc_qp_hint_attr attr;
};

/*
 * QP hints are optional. A QP is tied to one with MRC_QP_HINT in
 * mrc_modify_qp(). Destroying a hint that is still in use fails with EBUSY.
 */
struct mrc_qp_hint *mrc_create_qp_hint(
	struct mrc_context *mrc_ctx,
	struct mrc_qp_hint_init_attr *init_attr);
int mrc_destroy_qp_hint(struct mrc_qp_hint *qp_hint);
int mrc_query_qp_hint(struct mrc_qp_hint *qp_hint,
		      struct mrc_qp_hint_attr *qp_hint_attr,
		      int qp_hint_attr_mask);
int mrc_modify_qp_hint(struct mrc_qp_hint *qp_hint,
		       struct mrc_qp_hint_attr *qp_hint_attr,
		       int qp_hint_attr_mask);

/* Creation parameters of an MRC QP, modelled on ibv_qp_init_attr. */
struct mrc_qp_init_attr {
	void               *qp_context;
	struct mrc_cq      *send_cq;
	struct mrc_cq      *recv_cq;
	struct ibv_qp_cap   cap;
	int                 sq_sig_all;
	struct ibv_pd      *pd;
	/* Bits of enum ibv_qp_create_send_ops_flags. */
	uint64_t            send_ops_flags;
	/* One wire version bit, or 0 for the provider's default. */
	enum mrc_protocol_version    protocol_version;
};

/* Create/destroy a QP, as ibv_create_qp()/ibv_destroy_qp(). */
struct mrc_qp *mrc_create_qp(struct mrc_context *mrc_ctx,
			     struct mrc_qp_init_attr *mrc_qp_attr);
int mrc_destroy_qp(struct mrc_qp *qp);

/*
 * Selects mrc_qp_attr fields in mrc_query_qp()/mrc_modify_qp(). When moving
 * to INIT the hint and the EV/CC profile ids are given; to RTR the
 * responder-side WIMM and MPR; to RTS the requester-side WIMM and MPR, the
 * retry counts and the ACK timeout.
 */
enum mrc_qp_attr_mask {
	MRC_QP_MAX_WIMM			= 1 << 0,	/* wimm.max_wimm */
	MRC_QP_MAX_WIMM_DEST		= 1 << 1,	/* wimm.max_wimm_dest */
	MRC_QP_MPR			= 1 << 2,	/* mpr.mpr */
	MRC_QP_MPR_DEST			= 1 << 3,	/* mpr.mpr_dest */
	MRC_QP_TIMEOUT			= 1 << 4,	/* timeout */
	MRC_QP_EV_PROFILE_ID		= 1 << 5,	/* profile.ev_profile_id */
	MRC_QP_CC_PROFILE_ID		= 1 << 6,	/* profile.cc_profile_id */
	MRC_QP_HINT			= 1 << 7,	/* qp_hint */
	MRC_QP_RETRY_CNT		= 1 << 8,	/* retry.* */
	MRC_QP_CAP			= 1 << 9,	/* cap */
	MRC_QP_VENDOR_CFG		= 1 << 31	/* vendor_cfg */
};

/* Bits of mrc_qp_attr.cap. */
enum mrc_qp_cap {
	/* The remote responder cannot emit trim NACKs. */
	MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED	=  1 << 0,
	/* Use dynamic MPR in both roles; effective only if both ends set it. */
	MRC_QP_CAP_DYNAMIC_MPR			=  1 << 1,
	/* The remote responder does not report service time. */
	MRC_QP_CAP_SVC_TIME_DEST_UNSUPPORTED	=  1 << 2
};

/* MRC-specific QP attributes, alongside the verbs ones in ibv_qp_attr. */
struct mrc_qp_attr {
	/* Units of 128 PSNs. */
	struct {
		uint8_t mpr;		/* as requester */
		uint8_t mpr_dest;	/* as responder */
	} mpr;

	/* Outstanding write-with-immediate limits. */
	struct {
		uint16_t max_wimm;	/* as requester */
		uint16_t max_wimm_dest;	/* as responder */
	} wimm;

	/* Local ACK timeout of 1.024 us * 2^timeout (not the verbs 4.096 us
	 * base); at most 24, about 17 s. */
	uint8_t timeout;

	/* Ids of EV and CC profiles a controller has set up, learned by the
	 * application out of band. */
	struct {
		uint64_t ev_profile_id;
		uint64_t cc_profile_id;
	} profile;

	struct {
		uint8_t linear_cnt;	/* fixed-interval retries, at most 7 */
		uint8_t exp_cnt;	/* backoff retries, at most 25 (= forever) */
	} retry;

	/* NULL for none. */
	struct mrc_qp_hint *qp_hint;

	/* Bitmap of enum mrc_qp_cap. */
	uint32_t cap;

	uint8_t vendor_cfg[MRC_MAX_VENDOR_CFG_SIZE];
};

/*
 * Query/modify a QP, as ibv_query_qp()/ibv_modify_qp(), with both the verbs
 * and the MRC attribute sets. Modify refuses (EINVAL) alternate path,
 * migration, Q_Key, capability, SQD notify and rate limit attributes;
 * IBV_QP_PORT is accepted only as port 1 and IBV_QP_PKEY_INDEX only as 0.
 * The RNR, RD atomic and verbs timeout and retry count attributes are
 * accepted and ignored, so RC verbs code runs unchanged: MRC_QP_TIMEOUT and
 * MRC_QP_RETRY_CNT set the MRC timeout and retries. With IBV_QP_AV the
 * source GID is looked up on the context's verbs device.
 */
int mrc_query_qp(struct mrc_qp *qp,
		 struct ibv_qp_attr *vattr,
		 int vattr_mask,
		 struct mrc_qp_attr *mrc_attr,
		 int mrc_attr_mask,
		 struct mrc_qp_init_attr *init_attr);
int mrc_modify_qp(struct mrc_qp *qp,
		  struct ibv_qp_attr *vattr,
		  int vattr_mask,
		  struct mrc_qp_attr *mrc_attr,
		  int mrc_attr_mask);

/* The QP number to give the peer. */
int mrc_get_qpn(struct mrc_qp *qp,
		uint32_t *qpn);

/* Post receives (consumed by incoming writes with immediate) and sends
 * (RDMA write, with or without immediate), as ibv_post_recv/send(). */
int mrc_post_recv(struct mrc_qp *qp,
		  struct ibv_recv_wr *wr,
		  struct ibv_recv_wr **bad_wr);
int mrc_post_send(struct mrc_qp *qp,
		  struct ibv_send_wr *wr,
		  struct ibv_send_wr **bad_wr);

/* Asynchronous event, the MRC counterpart of ibv_async_event. */
struct mrc_async_event {
	union {
		struct mrc_cq *cq;
		struct mrc_qp *qp;
		int            port_num;
	} element;
	enum ibv_event_type    event_type;
};

/* Wait for the next async event; every one must be acked. */
int mrc_get_async_event(struct mrc_context *mrc_ctx,
			struct mrc_async_event *event);
void mrc_ack_async_event(struct mrc_async_event *event);

/*
 * CQ notification, as ibv_req_notify_cq()/ibv_get_cq_event()/
 * ibv_ack_cq_events(). Each event fetched must be acked (acks may be
 * batched); mrc_destroy_cq() waits for outstanding acks. A blocked
 * mrc_get_cq_event() fails with EIO if the device goes away.
 */
int mrc_req_notify_cq(struct mrc_cq *cq,
		      int solicited_only);
int mrc_get_cq_event(struct mrc_comp_channel *channel,
		     struct mrc_cq **cq,
		     void **cq_context);
void mrc_ack_cq_events(struct mrc_cq *cq,
		       unsigned int nevents);

#ifdef __cplusplus
}
#endif

#endif /* MRCNIC_MRC_H */
