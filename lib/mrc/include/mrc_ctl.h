/*
 * mrcnic's declaration of the OCP MRC controller API (mrc_ctl.h), written
 * from the published interface. Implemented by lib_mrc.so.
 *
 * A network controller uses these calls to set up and watch what MRC QPs
 * rely on: EV format profiles, EV profiles, CC profiles, port admin state,
 * EV state events and endpoint probes. It works through an ordinary
 * mrc_context from mrc_create_context() and needs CAP_NET_ADMIN.
 *
 * Conventions as in mrc.h: 0 on success, -1 with errno set on failure
 * (EINVAL bad argument, EPERM not privileged, EIO provider failure, plus the
 * call-specific codes noted below).
 *
 * All profiles share one life cycle, driven through profile_state:
 * INIT -> OFFLINE -> ONLINE -> OFFLINE -> INIT. OFFLINE is configurable but
 * unused; ONLINE is in use and only partly modifiable.
 */

#ifndef MRCNIC_MRC_CTL_H
#define MRCNIC_MRC_CTL_H

#include <stdint.h>
#include <infiniband/verbs.h>

#include <mrc.h>
#include <mrc_ctl_api_ver.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Size of every opaque vendor_cfg byte array in this header. */
#define MRC_CTL_MAX_VENDOR_CFG_SIZE 128

/* An EV entry with no value and no port. */
#define MRC_CTL_EV_UNPOPULATED \
	((struct mrc_ctl_ev){ .val = { 0 }, .port = 0 })

/* Storage for one EV value, in bytes. */
#define MRC_CTL_EV_MAX_BYTES 32

/* Control protocol versions, one bit each; 0 lets the provider pick. */
enum mrc_ctl_protocol_version {
	MRC_CTL_PROTOCOL_VERSION_0	= 0,
	MRC_CTL_PROTOCOL_VERSION_1	= 1 << 0,
};

/* Life-cycle state shared by all profile kinds. */
enum mrc_ctl_profile_state {
	MRC_CTL_PROFILE_INIT,		/* fresh, awaiting configuration */
	MRC_CTL_PROFILE_OFFLINE,	/* configured, not in use */
	MRC_CTL_PROFILE_ONLINE,		/* in use */
};

/* ------------------------------------------------------------------------
 * Device query
 * ---------------------------------------------------------------------- */

/* Bits of mrc_ctl_device_attr.opt_attr. */
enum mrc_ctl_attr_opt {
	/* ONLINE EV profiles accept the extra modifications listed below. */
	MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE	= 1 << 0,
	/* ONLINE CC profiles accept a new cc_config. */
	MRC_CTL_OPT_CAP_CC_PROFILE_MODIFY_ONLINE	= 1 << 1,
	/* EV state change events are available. */
	MRC_CTL_OPT_CAP_EV_EVENT			= 1 << 2,
	/* Explicit EV arrays must be a contiguous run of values starting at
	 * the first one. */
	MRC_CTL_OPT_CAP_EV_EXPLICIT_RANGE		= 1 << 3,
	/* mrc_ctl_ev_event.drop_count is an exact count, not a flag. */
	MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT	= 1 << 4,
	/* MRC_CTL_EP_OP_EV_PROBE is available. */
	MRC_CTL_OPT_CAP_EP_OP_EV_PROBE			= 1 << 5
};

/* Controller-side limits and features of the device. */
struct mrc_ctl_device_attr {
	/* Bitmap of enum mrc_ctl_protocol_version values spoken. */
	uint32_t mrc_ctl_protocol_version;

	struct {
		uint32_t ev_max_fmt_profiles;	/* EV format profiles */
		uint32_t ev_max_profiles;	/* EV profiles */
		uint32_t ev_max_count;		/* EVs, all profiles together */
		uint32_t ev_free_count;		/* EVs not yet allocated */
		uint32_t ev_max_count_profile;	/* EVs in one profile */
		uint32_t ev_count_align;	/* ev_count must be a multiple */
		/* Usable EV width in bits; the fields of a profile must fit. */
		uint32_t ev_max_width;
		/* Bitmap of enum mrc_ctl_ev_fmt_mode. */
		uint32_t ev_fmt_mode_mask;
		/* Bitmap of enum mrc_ctl_ev_mode. */
		uint32_t ev_mode_mask;
		/* Largest ev_op.entry_count per call; 0 for no limit. */
		uint32_t ev_op_max_entries;
	} ev;

	struct {
		uint32_t cc_max_profiles;
		/* NULL-terminated list of algorithm names owned by the
		 * library (do not free), e.g. "uet-1.0-nscc". */
		const char **algorithms;
	} cc;

	/* Bit n set: this function owns port n (1-based, as verbs). */
	uint32_t phy_port_mask;

	/* Bitmap of enum mrc_ctl_attr_opt. */
	uint32_t opt_attr;
};

/*
 * Report controller attributes; meant to be called after the EV generation
 * setup. The _ex form takes the MRC context and a support flag and is
 * the one to use from control API 1.0.1 on; the plain form gets 1.0.0
 * behaviour.
 */
#if MRC_CTL_API_VER_USED >= MRC_CTL_API_VER(1, 0, 1)
int mrc_ctl_query_device_ex(struct ibv_context *context,
			    struct mrc_context *mcontext,
			    struct mrc_ctl_device_attr *ctl_attr,
			    int *supported);
#endif
int mrc_ctl_query_device(struct ibv_context *context,
			 struct mrc_ctl_device_attr *ctl_attr);

/* Like mrc_query_version(), for the separately versioned control API. */
void mrc_ctl_query_version(uint32_t *current_version,
			   uint32_t *last_supported_version,
			   uint32_t *vendor_version,
			   uint32_t *last_supported_vendor_version);

/* ------------------------------------------------------------------------
 * Port administration
 * ---------------------------------------------------------------------- */

enum mrc_ctl_port_admin_state {
	MRC_CTL_PORT_ADMIN_DISABLED = 0,
	MRC_CTL_PORT_ADMIN_ENABLED  = 1,
};

enum mrc_ctl_port_attr_mask {
	MRC_CTL_PORT_ADMIN_STATE	= 1 << 0,
};

struct mrc_ctl_port_attr {
	/* A disabled port shows as IBV_PORT_DOWN in ibv_query_port(). */
	enum mrc_ctl_port_admin_state port_admin_state;
};

/* Read or set the admin state of port port_num (1-based). */
int mrc_ctl_query_port(struct mrc_context *context,
		       uint8_t port_num,
		       struct mrc_ctl_port_attr *attr,
		       int attr_mask);
int mrc_ctl_modify_port(struct mrc_context *context,
			uint8_t port_num,
			struct mrc_ctl_port_attr *attr,
			int attr_mask);

/* ------------------------------------------------------------------------
 * EV format profiles: how an EV is laid out in packet headers
 * ---------------------------------------------------------------------- */

enum mrc_ctl_ev_fmt_mode {
	/* EV bits split over the IPv6 flow label and the UDP source port */
	MRC_CTL_EV_FMT_MODE_STEV	= 1 << 0,
	/* SRv6 uSID encapsulation, optionally with an SRH */
	MRC_CTL_EV_FMT_MODE_SRV6	= 1 << 1,
	/* EV only in the UDP source port, IPv4 or IPv6 */
	MRC_CTL_EV_FMT_MODE_UDP		= 1 << 2,
};

enum mrc_ctl_ev_fmt_op {
	MRC_CTL_EV_FMT_OP_MODIFY_FIELDS,
	MRC_CTL_EV_FMT_OP_QUERY_FIELDS,
};

enum mrc_ctl_ev_fmt_profile_attr_mask {
	MRC_CTL_EV_FMT_PROFILE_STATE		= 1 << 0,
	MRC_CTL_EV_FMT_PROFILE_CUR_STATE	= 1 << 1,
	MRC_CTL_EV_FMT_PROFILE_MODE		= 1 << 2,
	MRC_CTL_EV_FMT_PROFILE_OP		= 1 << 3,
	MRC_CTL_EV_FMT_VENDOR_CFG		= 1 << 31,
};

struct mrc_ctl_ev_fmt_field {
	uint8_t width;		/* bits */
};

/*
 * A format profile is a list of header fields whose widths add up to the
 * full on-wire EV. Each EV profile refers to one and may not exceed it.
 */
struct mrc_ctl_ev_fmt_profile_attr {
	enum mrc_ctl_profile_state profile_state;	/* requested state */
	enum mrc_ctl_profile_state cur_profile_state;	/* state now */

	enum mrc_ctl_ev_fmt_mode ev_fmt_mode;

	struct {
		enum mrc_ctl_ev_fmt_op op;
		struct mrc_ctl_ev_fmt_field *fmt_fields;
		int fmt_field_count;	/* array length; updated on return */
	} ev_fmt_op;

	uint8_t vendor_cfg[MRC_CTL_MAX_VENDOR_CFG_SIZE];
};

/*
 * Configure an EV format profile. Reaching OFFLINE needs MODE; reaching
 * ONLINE needs MODIFY_FIELDS. While OFFLINE the state, mode and fields may
 * be changed; while ONLINE only a move back to OFFLINE (and field queries)
 * are accepted. EBUSY: an EV profile using it is ONLINE. E2BIG: the fields
 * cannot be supported.
 */
int mrc_ctl_modify_ev_fmt_profile(struct mrc_context *mrc_ctx,
				  uint64_t ev_fmt_profile_id,
				  struct mrc_ctl_ev_fmt_profile_attr *attr,
				  int attr_mask);

/*
 * Read an EV format profile. With MRC_CTL_EV_FMT_OP_QUERY_FIELDS the caller
 * supplies the fmt_fields array; if it is too short the call fails with
 * E2BIG and fmt_field_count says how long it must be. MODIFY_FIELDS is
 * refused here.
 */
int mrc_ctl_query_ev_fmt_profile(struct mrc_context *mrc_ctx,
				 uint64_t ev_fmt_profile_id,
				 struct mrc_ctl_ev_fmt_profile_attr *attr,
				 int attr_mask);

/* ------------------------------------------------------------------------
 * EVs
 * ---------------------------------------------------------------------- */

/*
 * One EV value. STEV uses the first 4 bytes; SRv6 uses bytes 0..15 for the
 * destination address and 16..31 for the single SRH segment.
 */
typedef uint8_t mrc_ctl_ev_t[MRC_CTL_EV_MAX_BYTES];

/* An EV bound to a port. */
struct mrc_ctl_ev {
	mrc_ctl_ev_t val;
	uint8_t port;		/* 1-based */
};

enum mrc_ctl_ev_state {
	MRC_CTL_EV_GOOD		= 1 << 0,
	MRC_CTL_EV_ASSUMED_BAD	= 1 << 1,
	MRC_CTL_EV_DENIED	= 1 << 2,
	MRC_CTL_EV_UNKNOWN	= 1 << 31
};

/* ------------------------------------------------------------------------
 * EV profiles: the set of EVs a QP sprays over
 * ---------------------------------------------------------------------- */

enum mrc_ctl_ev_mode {
	/* The provider chooses paths itself (e.g. ECMP); no EVs supplied */
	MRC_CTL_EV_MODE_AUTO	= 1 << 0,
	/* The controller lists the EVs */
	MRC_CTL_EV_MODE_EXP	= 1 << 1,
	/* The device generates EVs from field rules */
	MRC_CTL_EV_MODE_GEN	= 1 << 2,
};

enum mrc_ctl_ev_op {
	MRC_CTL_EV_OP_REPLACE_EV,
	MRC_CTL_EV_OP_MODIFY_EV_STATE,
	MRC_CTL_EV_OP_QUERY_EV_STATE,
	MRC_CTL_EV_OP_QUERY_EV_ARRAY,
};

enum mrc_ctl_ev_fields_op {
	MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS,
	MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS,
};

enum mrc_ctl_ev_profile_attr_mask {
	MRC_CTL_EV_PROFILE_STATE	= 1 << 0,
	MRC_CTL_EV_PROFILE_CUR_STATE	= 1 << 1,
	MRC_CTL_EV_PROFILE_MODE		= 1 << 2,
	MRC_CTL_EV_PROFILE_FMT_ID	= 1 << 3,
	MRC_CTL_EV_PROFILE_COUNT	= 1 << 4,
	MRC_CTL_EV_PROFILE_MIN_ACTIVE	= 1 << 5,
	MRC_CTL_EV_PROFILE_EVENT_MASK	= 1 << 6,
	MRC_CTL_EV_PROFILE_EV_OP	= 1 << 7,
	MRC_CTL_EV_PROFILE_EV_FIELDS_OP	= 1 << 8,
	MRC_CTL_EV_PROFILE_VENDOR_CFG	= 1 << 31,
};

/*
 * Expansion rule for one header field. The field starts as init_val; the
 * next popcount(mask) bits of the EV, read most significant first, then
 * overwrite the bits selected by mask, in the same order (a bit deposit).
 * Expanded fields are concatenated in order. min_val/max_val bound the
 * generated value in GEN mode. A fixed field has mask, min_val and max_val
 * all 0.
 */
struct mrc_ctl_ev_field {
	uint32_t width;
	uint32_t init_val;
	uint32_t min_val;
	uint32_t max_val;
	uint32_t mask;
};

/* Bits of mrc_ctl_ev_op_entry.flags. */
enum mrc_ctl_ev_op_flags {
	/* REPLACE_EV: replace every copy of ev, not just one. */
	MRC_CTL_EV_OP_F_ALL_COPIES  = 1 << 0,
};

/*
 * One element of an EV operation. Per operation:
 *   REPLACE_EV       ev, ev_new and state in; flags optional
 *   MODIFY_EV_STATE  ev and state in; flags optional
 *   QUERY_EV_STATE   ev in; state out
 *   QUERY_EV_ARRAY   ev and state out
 */
struct mrc_ctl_ev_op_entry {
	struct mrc_ctl_ev ev;
	struct mrc_ctl_ev ev_new;
	enum mrc_ctl_ev_state state;
	uint32_t flags;
};

/*
 * An EV profile. Its fields (see mrc_ctl_ev_field) may not outnumber or
 * outgrow those of the format profile it names; narrower fields are padded
 * with zeros on the wire.
 */
struct mrc_ctl_ev_profile_attr {
	enum mrc_ctl_profile_state profile_state;	/* requested state */
	enum mrc_ctl_profile_state cur_profile_state;	/* state now */

	enum mrc_ctl_ev_mode ev_mode;

	uint64_t ev_fmt_profile_id;

	/* EV array size for EXP and GEN modes, within the device limits;
	 * a query returns the size after alignment. */
	uint32_t ev_count;

	/* Floor on EVs not ASSUMED_BAD; no more than ev_count. */
	uint32_t ev_min_active;

	/* States (MRC_CTL_EV_GOOD, MRC_CTL_EV_ASSUMED_BAD) that raise an
	 * mrc_ctl_ev_event on change. */
	int ev_event_mask;

	struct {
		enum mrc_ctl_ev_op op;	/* applies to every entry */
		struct mrc_ctl_ev_op_entry *entries;
		int entry_count;	/* array length; updated on return */
	} ev_op;

	struct {
		enum mrc_ctl_ev_fields_op op;
		struct mrc_ctl_ev_field *fields;
		int field_count;	/* array length; updated on return */
	} ev_fields_op;

	uint8_t vendor_cfg[MRC_CTL_MAX_VENDOR_CFG_SIZE];
};

/*
 * Configure an EV profile.
 *
 * Reaching OFFLINE needs MODE, FMT_ID, COUNT and the fields; an explicit
 * array then holds only MRC_CTL_EV_UNPOPULATED entries. Reaching ONLINE
 * needs MIN_ACTIVE and EVENT_MASK, and for EXP mode every entry replaced.
 * While ONLINE only a move to OFFLINE and the state/query operations are
 * accepted, plus EVENT_MASK, REPLACE_EV and field changes if the device has
 * MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE.
 *
 * At most one of MRC_CTL_EV_PROFILE_EV_OP and _EV_FIELDS_OP may be set
 * (EINVAL otherwise). An EV operation stops at the first failing entry, so
 * earlier entries may have taken effect; query the array to find out.
 *
 * E2BIG: array larger than supported. ENOENT: EV not present. EBUSY: live
 * QPs use the profile.
 */
int mrc_ctl_modify_ev_profile(struct mrc_context *mrc_ctx,
			      uint64_t ev_profile_id,
			      struct mrc_ctl_ev_profile_attr *attr,
			      int attr_mask);

/*
 * Read an EV profile. Operation rules as for modify. For QUERY_FIELDS and
 * QUERY_EV_ARRAY a too-short array fails with E2BIG and the count member
 * is set to the length needed. ENOENT: EV not present.
 */
int mrc_ctl_query_ev_profile(struct mrc_context *mrc_ctx,
			     uint64_t ev_profile_id,
			     struct mrc_ctl_ev_profile_attr *attr,
			     int attr_mask);

/* ------------------------------------------------------------------------
 * CC profiles
 * ---------------------------------------------------------------------- */

enum mrc_ctl_cc_profile_attr_mask {
	MRC_CTL_CC_PROFILE_STATE	= 1 << 0,
	MRC_CTL_CC_PROFILE_CUR_STATE	= 1 << 1,
	MRC_CTL_CC_PROFILE_ALGORITHM	= 1 << 2,
	MRC_CTL_CC_PROFILE_CONFIG	= 1 << 3,
	MRC_CTL_CC_PROFILE_VENDOR_CFG	= 1 << 31,
};

struct mrc_ctl_cc_profile_attr {
	enum mrc_ctl_profile_state profile_state;	/* requested state */
	enum mrc_ctl_profile_state cur_profile_state;	/* state now */

	/* One of mrc_ctl_device_attr.cc.algorithms, or NULL for no CC. */
	const char *algorithm;

	/* Parameters of that algorithm, e.g. struct mrc_ctl_cc_nscc_cfg. */
	const void *cc_config;

	uint8_t vendor_cfg[MRC_CTL_MAX_VENDOR_CFG_SIZE];
};

/* Parameters for "uet-1.0-nscc". Times in ns, sizes in bytes. */
struct mrc_ctl_cc_nscc_cfg {
	uint8_t disable_qa;		/* non-zero turns quick adapt off */
	uint32_t adjust_bytes_threshold;
	uint32_t adjust_period_threshold;
	uint32_t base_rtt;
	float eta;
	float fi;
	float fi_scale;
	float gamma;
	float max_md_jump;
	uint32_t max_cwnd;
	uint8_t qa_gate;
	uint32_t qa_threshold;
	uint32_t target_delay;
};

/*
 * Configure a CC profile. Reaching OFFLINE needs ALGORITHM, reaching ONLINE
 * needs CONFIG; CONFIG may change while ONLINE if the device has
 * MRC_CTL_OPT_CAP_CC_PROFILE_MODIFY_ONLINE. EBUSY: live QPs use it.
 */
int mrc_ctl_modify_cc_profile(struct mrc_context *mrc_ctx,
			      uint64_t cc_profile_id,
			      struct mrc_ctl_cc_profile_attr *attr,
			      int attr_mask);
int mrc_ctl_query_cc_profile(struct mrc_context *mrc_ctx,
			     uint64_t cc_profile_id,
			     struct mrc_ctl_cc_profile_attr *attr,
			     int attr_mask);

/* ------------------------------------------------------------------------
 * EV state events
 * ---------------------------------------------------------------------- */

/* Raised when an EV enters a state named in its profile's ev_event_mask. */
struct mrc_ctl_ev_event {
	uint64_t profile_id;
	struct mrc_ctl_ev ev;
	/* Events lost just before this one: an exact count with
	 * MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT, otherwise 0 or 1. */
	uint32_t drop_count;
#if MRC_CTL_API_VER_USED >= MRC_CTL_API_VER(1, 0, 1)
	/* New state; present, and filled, from control API 1.0.1 on. */
	enum mrc_ctl_ev_state state;
#endif
};

/*
 * A CQ that delivers mrc_ctl_ev_event records instead of work completions.
 * Arguments as mrc_create_cq(); unlike other CQs it never overruns.
 */
struct mrc_cq *mrc_ctl_create_ev_event_cq(struct mrc_context *mrc_ctx,
					  int cqe,
					  void *cq_context,
					  struct mrc_comp_channel *channel,
					  int comp_vector);

/* Take up to num_entries events. Returns how many were written, or a
 * negative errno value. */
int mrc_ctl_poll_ev_event(struct mrc_cq *ev_cq,
			  int num_entries,
			  struct mrc_ctl_ev_event *ev_event);

/* ------------------------------------------------------------------------
 * Endpoint requests
 * ---------------------------------------------------------------------- */

enum mrc_ctl_ep_op_type {
	MRC_CTL_EP_OP_EV_PROBE,			/* probe a path */
	MRC_CTL_EP_OP_PORT_STATUS_UPDATE	/* exchange port status */
};

struct mrc_ctl_ep_req {
	/* Caller's tag, unique among requests whose answers may still be
	 * in flight. */
	uint16_t req_id;
	/* RoCE v2 GIDs only. */
	union ibv_gid sgid;
	union ibv_gid dgid;

	enum mrc_ctl_ev_fmt_mode ev_fmt_mode;
	/* Path (and local port) the request travels on. */
	struct mrc_ctl_ev req_ev;

	union {
		struct {
			uint32_t port_status;	/* bit n: port n (1-based) */
		} port_status_update;
	} op;
};

struct mrc_ctl_ep_rsp {
	uint16_t req_id;	/* of the matching request */
	uint8_t port;		/* arrival port, 1-based */
	unsigned int rtt;	/* ns */
	uint8_t adj_svc_time;	/* non-zero: rtt net of responder time */
};

/*
 * Send num_req requests of one kind with traffic class (DSCP) req_tc and
 * wait up to rsp_timeout ns. Answers land in rsp (room for num_req) in
 * arrival order, *num_rsp of them; late answers are discarded.
 * EAGAIN: retry later. ENOMEM, ENOTSUP. ETIMEDOUT: not every request was
 * answered in time.
 */
int mrc_ctl_ep_batch_send_wait(struct mrc_context *mrc_ctx,
			       uint8_t req_tc,
			       enum mrc_ctl_ep_op_type op_type,
			       struct mrc_ctl_ep_req *req,
			       int num_req,
			       uint32_t rsp_timeout,
			       struct mrc_ctl_ep_rsp *rsp,
			       int *num_rsp);

#ifdef __cplusplus
}
#endif

#endif /* MRCNIC_MRC_CTL_H */
