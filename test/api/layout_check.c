/*
 * Compile-time check that mrcnic's MRC headers (lib/mrc/include) present the
 * same interface as the published OCP MRC headers: struct sizes, alignments,
 * member offsets, sizes and types, every enumerator's value (and, in C++,
 * its enum type), the version and size macros, the version-gated
 * declarations, and the exact type of every API function.
 *
 * The expected numbers were measured by compiling a probe against the
 * original OCP headers (LP64, gcc 12). Because the checks only refer to the
 * public names, this same file also compiles against the OCP headers, which
 * is how the equivalence is shown.
 *
 * Nothing here is linked or run; lib_mrc.so is not needed:
 *   gcc -std=gnu11 -Wall -Wextra -Werror -c test/api/layout_check.c -I lib/mrc/include
 *   g++ -std=c++20 -Wall -Wextra -Werror -x c++ -fsyntax-only test/api/layout_check.c -I lib/mrc/include
 * Add -D'MRC_API_VER_USED=MRC_API_VER(1, 0, 0)' and
 * -D'MRC_CTL_API_VER_USED=MRC_CTL_API_VER(1, 0, 0)' to check the 1.0.0 view.
 */

#ifndef MRC_API_VER_USED
#define LC_API_VER_DEFAULTED 1
#endif
#ifndef MRC_CTL_API_VER_USED
#define LC_CTL_API_VER_DEFAULTED 1
#endif

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

/* mrc_ctl.h must stand alone (it pulls in mrc.h); a repeat is harmless. */
#include <mrc_ctl.h>
#include <mrc.h>
#include <mrc_ctl.h>

#ifdef __cplusplus
#include <type_traits>
#define LC_TYPEOF(x) decltype(x)
#define LC_ALIGNOF(T) alignof(T)
#define LC_SAME_TYPE(A, B) (std::is_same<A, B>::value)
/* Unparenthesised member access: decltype yields the declared type. */
#define LC_MEMBER_IS(T, S, m) (std::is_same<T, decltype(((struct S *)0)->m)>::value)
#define LC_ENUM(E, name, v) \
	static_assert((name) == (v) && std::is_same<decltype(name), enum E>::value, #name)
#else
#define LC_TYPEOF(x) __typeof__(x)
#define LC_ALIGNOF(T) _Alignof(T)
#define LC_SAME_TYPE(A, B) _Generic((A *)0, B *: 1, default: 0)
#define LC_MEMBER_IS(T, S, m) _Generic(&((struct S *)0)->m, T *: 1, default: 0)
#define LC_ENUM(E, name, v) static_assert((name) == (v), #name)
#endif

/* Member without a named type (anonymous struct/union). */
#define LC_MEMBER(S, m, off, size) \
	static_assert(offsetof(struct S, m) == (off), #S "." #m " offset"); \
	static_assert(sizeof(((struct S *)0)->m) == (size), #S "." #m " size")
/* Member with its declared type. */
#define LC_FIELD(S, m, off, size, T) \
	LC_MEMBER(S, m, off, size); \
	static_assert(LC_MEMBER_IS(T, S, m), #S "." #m " type")
#define LC_STRUCT(S, size, align) \
	static_assert(sizeof(struct S) == (size), "sizeof " #S); \
	static_assert(LC_ALIGNOF(struct S) == (align), "alignof " #S)
#define LC_ENUM_SIZE(E, size) static_assert(sizeof(enum E) == (size), "sizeof enum " #E)

/* Array member types, spelled so that "T *" works in the macros above. */
typedef uint8_t lc_u8x128[128];
typedef uint8_t lc_u8x32[32];

/* The numbers below are for LP64 targets. */
static_assert(sizeof(void *) == 8 && sizeof(long) == 8, "LP64 target expected");


/* ---- mrc.h structures ---- */

LC_STRUCT(mrc_device_attr, 20, 4);
LC_FIELD(mrc_device_attr, mrc_protocol_version, 0, 4, uint32_t);
LC_MEMBER(mrc_device_attr, wimm_attr, 4, 4);
LC_FIELD(mrc_device_attr, wimm_attr.max_wimm, 4, 2, uint16_t);
LC_FIELD(mrc_device_attr, wimm_attr.max_wimm_dest, 6, 2, uint16_t);
LC_MEMBER(mrc_device_attr, mpr_attr, 8, 2);
LC_FIELD(mrc_device_attr, mpr_attr.max_mpr, 8, 1, uint8_t);
LC_FIELD(mrc_device_attr, mpr_attr.mpr_resolution, 9, 1, uint8_t);
LC_MEMBER(mrc_device_attr, qp_attr, 12, 4);
LC_FIELD(mrc_device_attr, qp_attr.max_qp_hint, 12, 4, uint32_t);
LC_FIELD(mrc_device_attr, cap, 16, 4, uint32_t);

LC_STRUCT(mrc_context_attr, 8, 4);
LC_FIELD(mrc_context_attr, mrc_api_version_used, 0, 4, uint32_t);
LC_FIELD(mrc_context_attr, mrc_vendor_api_version_used, 4, 4, uint32_t);

LC_STRUCT(mrc_qp_hint_attr, 140, 4);
LC_FIELD(mrc_qp_hint_attr, num_qps_per_peer, 0, 4, int);
LC_FIELD(mrc_qp_hint_attr, num_send_peers, 4, 4, int);
LC_FIELD(mrc_qp_hint_attr, num_remote_recv_peers, 8, 4, int);
LC_FIELD(mrc_qp_hint_attr, vendor_cfg, 12, 128, lc_u8x128);

LC_STRUCT(mrc_qp_hint_init_attr, 140, 4);
LC_FIELD(mrc_qp_hint_init_attr, attr, 0, 140, struct mrc_qp_hint_attr);

LC_STRUCT(mrc_qp_init_attr, 72, 8);
LC_FIELD(mrc_qp_init_attr, qp_context, 0, 8, void *);
LC_FIELD(mrc_qp_init_attr, send_cq, 8, 8, struct mrc_cq *);
LC_FIELD(mrc_qp_init_attr, recv_cq, 16, 8, struct mrc_cq *);
LC_FIELD(mrc_qp_init_attr, cap, 24, 20, struct ibv_qp_cap);
LC_FIELD(mrc_qp_init_attr, sq_sig_all, 44, 4, int);
LC_FIELD(mrc_qp_init_attr, pd, 48, 8, struct ibv_pd *);
LC_FIELD(mrc_qp_init_attr, send_ops_flags, 56, 8, uint64_t);
LC_FIELD(mrc_qp_init_attr, protocol_version, 64, 4, enum mrc_protocol_version);

LC_STRUCT(mrc_qp_attr, 176, 8);
LC_MEMBER(mrc_qp_attr, mpr, 0, 2);
LC_FIELD(mrc_qp_attr, mpr.mpr, 0, 1, uint8_t);
LC_FIELD(mrc_qp_attr, mpr.mpr_dest, 1, 1, uint8_t);
LC_MEMBER(mrc_qp_attr, wimm, 2, 4);
LC_FIELD(mrc_qp_attr, wimm.max_wimm, 2, 2, uint16_t);
LC_FIELD(mrc_qp_attr, wimm.max_wimm_dest, 4, 2, uint16_t);
LC_FIELD(mrc_qp_attr, timeout, 6, 1, uint8_t);
LC_MEMBER(mrc_qp_attr, profile, 8, 16);
LC_FIELD(mrc_qp_attr, profile.ev_profile_id, 8, 8, uint64_t);
LC_FIELD(mrc_qp_attr, profile.cc_profile_id, 16, 8, uint64_t);
LC_MEMBER(mrc_qp_attr, retry, 24, 2);
LC_FIELD(mrc_qp_attr, retry.linear_cnt, 24, 1, uint8_t);
LC_FIELD(mrc_qp_attr, retry.exp_cnt, 25, 1, uint8_t);
LC_FIELD(mrc_qp_attr, qp_hint, 32, 8, struct mrc_qp_hint *);
LC_FIELD(mrc_qp_attr, cap, 40, 4, uint32_t);
LC_FIELD(mrc_qp_attr, vendor_cfg, 44, 128, lc_u8x128);

LC_STRUCT(mrc_async_event, 16, 8);
LC_MEMBER(mrc_async_event, element, 0, 8);
LC_FIELD(mrc_async_event, element.cq, 0, 8, struct mrc_cq *);
LC_FIELD(mrc_async_event, element.qp, 0, 8, struct mrc_qp *);
LC_FIELD(mrc_async_event, element.port_num, 0, 4, int);
LC_FIELD(mrc_async_event, event_type, 8, 4, enum ibv_event_type);


/* ---- mrc_ctl.h structures ---- */

static_assert(sizeof(mrc_ctl_ev_t) == 32, "sizeof mrc_ctl_ev_t");
static_assert(LC_SAME_TYPE(mrc_ctl_ev_t, lc_u8x32), "mrc_ctl_ev_t type");

LC_STRUCT(mrc_ctl_device_attr, 72, 8);
LC_FIELD(mrc_ctl_device_attr, mrc_ctl_protocol_version, 0, 4, uint32_t);
LC_MEMBER(mrc_ctl_device_attr, ev, 4, 40);
LC_FIELD(mrc_ctl_device_attr, ev.ev_max_fmt_profiles, 4, 4, uint32_t);
LC_FIELD(mrc_ctl_device_attr, ev.ev_max_profiles, 8, 4, uint32_t);
LC_FIELD(mrc_ctl_device_attr, ev.ev_max_count, 12, 4, uint32_t);
LC_FIELD(mrc_ctl_device_attr, ev.ev_free_count, 16, 4, uint32_t);
LC_FIELD(mrc_ctl_device_attr, ev.ev_max_count_profile, 20, 4, uint32_t);
LC_FIELD(mrc_ctl_device_attr, ev.ev_count_align, 24, 4, uint32_t);
LC_FIELD(mrc_ctl_device_attr, ev.ev_max_width, 28, 4, uint32_t);
LC_FIELD(mrc_ctl_device_attr, ev.ev_fmt_mode_mask, 32, 4, uint32_t);
LC_FIELD(mrc_ctl_device_attr, ev.ev_mode_mask, 36, 4, uint32_t);
LC_FIELD(mrc_ctl_device_attr, ev.ev_op_max_entries, 40, 4, uint32_t);
LC_MEMBER(mrc_ctl_device_attr, cc, 48, 16);
LC_FIELD(mrc_ctl_device_attr, cc.cc_max_profiles, 48, 4, uint32_t);
LC_FIELD(mrc_ctl_device_attr, cc.algorithms, 56, 8, const char **);
LC_FIELD(mrc_ctl_device_attr, phy_port_mask, 64, 4, uint32_t);
LC_FIELD(mrc_ctl_device_attr, opt_attr, 68, 4, uint32_t);

LC_STRUCT(mrc_ctl_port_attr, 4, 4);
LC_FIELD(mrc_ctl_port_attr, port_admin_state, 0, 4, enum mrc_ctl_port_admin_state);

LC_STRUCT(mrc_ctl_ev_fmt_field, 1, 1);
LC_FIELD(mrc_ctl_ev_fmt_field, width, 0, 1, uint8_t);

LC_STRUCT(mrc_ctl_ev_fmt_profile_attr, 168, 8);
LC_FIELD(mrc_ctl_ev_fmt_profile_attr, profile_state, 0, 4, enum mrc_ctl_profile_state);
LC_FIELD(mrc_ctl_ev_fmt_profile_attr, cur_profile_state, 4, 4, enum mrc_ctl_profile_state);
LC_FIELD(mrc_ctl_ev_fmt_profile_attr, ev_fmt_mode, 8, 4, enum mrc_ctl_ev_fmt_mode);
LC_MEMBER(mrc_ctl_ev_fmt_profile_attr, ev_fmt_op, 16, 24);
LC_FIELD(mrc_ctl_ev_fmt_profile_attr, ev_fmt_op.op, 16, 4, enum mrc_ctl_ev_fmt_op);
LC_FIELD(mrc_ctl_ev_fmt_profile_attr, ev_fmt_op.fmt_fields, 24, 8, struct mrc_ctl_ev_fmt_field *);
LC_FIELD(mrc_ctl_ev_fmt_profile_attr, ev_fmt_op.fmt_field_count, 32, 4, int);
LC_FIELD(mrc_ctl_ev_fmt_profile_attr, vendor_cfg, 40, 128, lc_u8x128);

LC_STRUCT(mrc_ctl_ev, 33, 1);
LC_FIELD(mrc_ctl_ev, val, 0, 32, mrc_ctl_ev_t);
LC_FIELD(mrc_ctl_ev, port, 32, 1, uint8_t);

LC_STRUCT(mrc_ctl_ev_field, 20, 4);
LC_FIELD(mrc_ctl_ev_field, width, 0, 4, uint32_t);
LC_FIELD(mrc_ctl_ev_field, init_val, 4, 4, uint32_t);
LC_FIELD(mrc_ctl_ev_field, min_val, 8, 4, uint32_t);
LC_FIELD(mrc_ctl_ev_field, max_val, 12, 4, uint32_t);
LC_FIELD(mrc_ctl_ev_field, mask, 16, 4, uint32_t);

LC_STRUCT(mrc_ctl_ev_op_entry, 76, 4);
LC_FIELD(mrc_ctl_ev_op_entry, ev, 0, 33, struct mrc_ctl_ev);
LC_FIELD(mrc_ctl_ev_op_entry, ev_new, 33, 33, struct mrc_ctl_ev);
LC_FIELD(mrc_ctl_ev_op_entry, state, 68, 4, enum mrc_ctl_ev_state);
LC_FIELD(mrc_ctl_ev_op_entry, flags, 72, 4, uint32_t);

LC_STRUCT(mrc_ctl_ev_profile_attr, 216, 8);
LC_FIELD(mrc_ctl_ev_profile_attr, profile_state, 0, 4, enum mrc_ctl_profile_state);
LC_FIELD(mrc_ctl_ev_profile_attr, cur_profile_state, 4, 4, enum mrc_ctl_profile_state);
LC_FIELD(mrc_ctl_ev_profile_attr, ev_mode, 8, 4, enum mrc_ctl_ev_mode);
LC_FIELD(mrc_ctl_ev_profile_attr, ev_fmt_profile_id, 16, 8, uint64_t);
LC_FIELD(mrc_ctl_ev_profile_attr, ev_count, 24, 4, uint32_t);
LC_FIELD(mrc_ctl_ev_profile_attr, ev_min_active, 28, 4, uint32_t);
LC_FIELD(mrc_ctl_ev_profile_attr, ev_event_mask, 32, 4, int);
LC_MEMBER(mrc_ctl_ev_profile_attr, ev_op, 40, 24);
LC_FIELD(mrc_ctl_ev_profile_attr, ev_op.op, 40, 4, enum mrc_ctl_ev_op);
LC_FIELD(mrc_ctl_ev_profile_attr, ev_op.entries, 48, 8, struct mrc_ctl_ev_op_entry *);
LC_FIELD(mrc_ctl_ev_profile_attr, ev_op.entry_count, 56, 4, int);
LC_MEMBER(mrc_ctl_ev_profile_attr, ev_fields_op, 64, 24);
LC_FIELD(mrc_ctl_ev_profile_attr, ev_fields_op.op, 64, 4, enum mrc_ctl_ev_fields_op);
LC_FIELD(mrc_ctl_ev_profile_attr, ev_fields_op.fields, 72, 8, struct mrc_ctl_ev_field *);
LC_FIELD(mrc_ctl_ev_profile_attr, ev_fields_op.field_count, 80, 4, int);
LC_FIELD(mrc_ctl_ev_profile_attr, vendor_cfg, 88, 128, lc_u8x128);

LC_STRUCT(mrc_ctl_cc_profile_attr, 152, 8);
LC_FIELD(mrc_ctl_cc_profile_attr, profile_state, 0, 4, enum mrc_ctl_profile_state);
LC_FIELD(mrc_ctl_cc_profile_attr, cur_profile_state, 4, 4, enum mrc_ctl_profile_state);
LC_FIELD(mrc_ctl_cc_profile_attr, algorithm, 8, 8, const char *);
LC_FIELD(mrc_ctl_cc_profile_attr, cc_config, 16, 8, const void *);
LC_FIELD(mrc_ctl_cc_profile_attr, vendor_cfg, 24, 128, lc_u8x128);

LC_STRUCT(mrc_ctl_cc_nscc_cfg, 52, 4);
LC_FIELD(mrc_ctl_cc_nscc_cfg, disable_qa, 0, 1, uint8_t);
LC_FIELD(mrc_ctl_cc_nscc_cfg, adjust_bytes_threshold, 4, 4, uint32_t);
LC_FIELD(mrc_ctl_cc_nscc_cfg, adjust_period_threshold, 8, 4, uint32_t);
LC_FIELD(mrc_ctl_cc_nscc_cfg, base_rtt, 12, 4, uint32_t);
LC_FIELD(mrc_ctl_cc_nscc_cfg, eta, 16, 4, float);
LC_FIELD(mrc_ctl_cc_nscc_cfg, fi, 20, 4, float);
LC_FIELD(mrc_ctl_cc_nscc_cfg, fi_scale, 24, 4, float);
LC_FIELD(mrc_ctl_cc_nscc_cfg, gamma, 28, 4, float);
LC_FIELD(mrc_ctl_cc_nscc_cfg, max_md_jump, 32, 4, float);
LC_FIELD(mrc_ctl_cc_nscc_cfg, max_cwnd, 36, 4, uint32_t);
LC_FIELD(mrc_ctl_cc_nscc_cfg, qa_gate, 40, 1, uint8_t);
LC_FIELD(mrc_ctl_cc_nscc_cfg, qa_threshold, 44, 4, uint32_t);
LC_FIELD(mrc_ctl_cc_nscc_cfg, target_delay, 48, 4, uint32_t);

LC_STRUCT(mrc_ctl_ep_req, 88, 8);
LC_FIELD(mrc_ctl_ep_req, req_id, 0, 2, uint16_t);
LC_FIELD(mrc_ctl_ep_req, sgid, 8, 16, union ibv_gid);
LC_FIELD(mrc_ctl_ep_req, dgid, 24, 16, union ibv_gid);
LC_FIELD(mrc_ctl_ep_req, ev_fmt_mode, 40, 4, enum mrc_ctl_ev_fmt_mode);
LC_FIELD(mrc_ctl_ep_req, req_ev, 44, 33, struct mrc_ctl_ev);
LC_MEMBER(mrc_ctl_ep_req, op, 80, 4);
LC_MEMBER(mrc_ctl_ep_req, op.port_status_update, 80, 4);
LC_FIELD(mrc_ctl_ep_req, op.port_status_update.port_status, 80, 4, uint32_t);

LC_STRUCT(mrc_ctl_ep_rsp, 12, 4);
LC_FIELD(mrc_ctl_ep_rsp, req_id, 0, 2, uint16_t);
LC_FIELD(mrc_ctl_ep_rsp, port, 2, 1, uint8_t);
LC_FIELD(mrc_ctl_ep_rsp, rtt, 4, 4, unsigned int);
LC_FIELD(mrc_ctl_ep_rsp, adj_svc_time, 8, 1, uint8_t);

/* mrc_ctl_ev_event gains "state" from control API 1.0.1 on. */
#if MRC_CTL_API_VER_USED >= MRC_CTL_API_VER(1, 0, 1)
LC_STRUCT(mrc_ctl_ev_event, 56, 8);
LC_FIELD(mrc_ctl_ev_event, profile_id, 0, 8, uint64_t);
LC_FIELD(mrc_ctl_ev_event, ev, 8, 33, struct mrc_ctl_ev);
LC_FIELD(mrc_ctl_ev_event, drop_count, 44, 4, uint32_t);
LC_FIELD(mrc_ctl_ev_event, state, 48, 4, enum mrc_ctl_ev_state);
#else
LC_STRUCT(mrc_ctl_ev_event, 48, 8);
LC_FIELD(mrc_ctl_ev_event, profile_id, 0, 8, uint64_t);
LC_FIELD(mrc_ctl_ev_event, ev, 8, 33, struct mrc_ctl_ev);
LC_FIELD(mrc_ctl_ev_event, drop_count, 44, 4, uint32_t);
#endif

/* ---- enumerations ---- */

LC_ENUM_SIZE(mrc_protocol_version, 4);
LC_ENUM(mrc_protocol_version, MRC_PROTOCOL_VERSION_0, 0);
LC_ENUM(mrc_protocol_version, MRC_PROTOCOL_VERSION_1, 1);

LC_ENUM_SIZE(mrc_device_cap, 4);
LC_ENUM(mrc_device_cap, MRC_DEVICE_CAP_TRIM_NACK, 1);
LC_ENUM(mrc_device_cap, MRC_DEVICE_CAP_DYNAMIC_MPR, 2);
LC_ENUM(mrc_device_cap, MRC_DEVICE_CAP_SVC_TIME, 4);

LC_ENUM_SIZE(mrc_qp_hint_attr_mask, 4);
LC_ENUM(mrc_qp_hint_attr_mask, MRC_QP_HINT_NUM_QPS_PER_PEER, 1);
LC_ENUM(mrc_qp_hint_attr_mask, MRC_QP_HINT_NUM_SEND_PEERS, 2);
LC_ENUM(mrc_qp_hint_attr_mask, MRC_QP_HINT_NUM_REMOTE_RECV_PEERS, 4);
LC_ENUM(mrc_qp_hint_attr_mask, MRC_QP_HINT_VENDOR_CFG, (-2147483647 - 1));

LC_ENUM_SIZE(mrc_qp_attr_mask, 4);
LC_ENUM(mrc_qp_attr_mask, MRC_QP_MAX_WIMM, 1);
LC_ENUM(mrc_qp_attr_mask, MRC_QP_MAX_WIMM_DEST, 2);
LC_ENUM(mrc_qp_attr_mask, MRC_QP_MPR, 4);
LC_ENUM(mrc_qp_attr_mask, MRC_QP_MPR_DEST, 8);
LC_ENUM(mrc_qp_attr_mask, MRC_QP_TIMEOUT, 16);
LC_ENUM(mrc_qp_attr_mask, MRC_QP_EV_PROFILE_ID, 32);
LC_ENUM(mrc_qp_attr_mask, MRC_QP_CC_PROFILE_ID, 64);
LC_ENUM(mrc_qp_attr_mask, MRC_QP_HINT, 128);
LC_ENUM(mrc_qp_attr_mask, MRC_QP_RETRY_CNT, 0x100);
LC_ENUM(mrc_qp_attr_mask, MRC_QP_CAP, 0x200);
LC_ENUM(mrc_qp_attr_mask, MRC_QP_VENDOR_CFG, (-2147483647 - 1));

LC_ENUM_SIZE(mrc_qp_cap, 4);
LC_ENUM(mrc_qp_cap, MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED, 1);
LC_ENUM(mrc_qp_cap, MRC_QP_CAP_DYNAMIC_MPR, 2);
LC_ENUM(mrc_qp_cap, MRC_QP_CAP_SVC_TIME_DEST_UNSUPPORTED, 4);

LC_ENUM_SIZE(mrc_ctl_protocol_version, 4);
LC_ENUM(mrc_ctl_protocol_version, MRC_CTL_PROTOCOL_VERSION_0, 0);
LC_ENUM(mrc_ctl_protocol_version, MRC_CTL_PROTOCOL_VERSION_1, 1);

LC_ENUM_SIZE(mrc_ctl_profile_state, 4);
LC_ENUM(mrc_ctl_profile_state, MRC_CTL_PROFILE_INIT, 0);
LC_ENUM(mrc_ctl_profile_state, MRC_CTL_PROFILE_OFFLINE, 1);
LC_ENUM(mrc_ctl_profile_state, MRC_CTL_PROFILE_ONLINE, 2);

LC_ENUM_SIZE(mrc_ctl_attr_opt, 4);
LC_ENUM(mrc_ctl_attr_opt, MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE, 1);
LC_ENUM(mrc_ctl_attr_opt, MRC_CTL_OPT_CAP_CC_PROFILE_MODIFY_ONLINE, 2);
LC_ENUM(mrc_ctl_attr_opt, MRC_CTL_OPT_CAP_EV_EVENT, 4);
LC_ENUM(mrc_ctl_attr_opt, MRC_CTL_OPT_CAP_EV_EXPLICIT_RANGE, 8);
LC_ENUM(mrc_ctl_attr_opt, MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT, 16);
LC_ENUM(mrc_ctl_attr_opt, MRC_CTL_OPT_CAP_EP_OP_EV_PROBE, 32);

LC_ENUM_SIZE(mrc_ctl_port_admin_state, 4);
LC_ENUM(mrc_ctl_port_admin_state, MRC_CTL_PORT_ADMIN_DISABLED, 0);
LC_ENUM(mrc_ctl_port_admin_state, MRC_CTL_PORT_ADMIN_ENABLED, 1);

LC_ENUM_SIZE(mrc_ctl_port_attr_mask, 4);
LC_ENUM(mrc_ctl_port_attr_mask, MRC_CTL_PORT_ADMIN_STATE, 1);

LC_ENUM_SIZE(mrc_ctl_ev_fmt_mode, 4);
LC_ENUM(mrc_ctl_ev_fmt_mode, MRC_CTL_EV_FMT_MODE_STEV, 1);
LC_ENUM(mrc_ctl_ev_fmt_mode, MRC_CTL_EV_FMT_MODE_SRV6, 2);
LC_ENUM(mrc_ctl_ev_fmt_mode, MRC_CTL_EV_FMT_MODE_UDP, 4);

LC_ENUM_SIZE(mrc_ctl_ev_fmt_op, 4);
LC_ENUM(mrc_ctl_ev_fmt_op, MRC_CTL_EV_FMT_OP_MODIFY_FIELDS, 0);
LC_ENUM(mrc_ctl_ev_fmt_op, MRC_CTL_EV_FMT_OP_QUERY_FIELDS, 1);

LC_ENUM_SIZE(mrc_ctl_ev_fmt_profile_attr_mask, 4);
LC_ENUM(mrc_ctl_ev_fmt_profile_attr_mask, MRC_CTL_EV_FMT_PROFILE_STATE, 1);
LC_ENUM(mrc_ctl_ev_fmt_profile_attr_mask, MRC_CTL_EV_FMT_PROFILE_CUR_STATE, 2);
LC_ENUM(mrc_ctl_ev_fmt_profile_attr_mask, MRC_CTL_EV_FMT_PROFILE_MODE, 4);
LC_ENUM(mrc_ctl_ev_fmt_profile_attr_mask, MRC_CTL_EV_FMT_PROFILE_OP, 8);
LC_ENUM(mrc_ctl_ev_fmt_profile_attr_mask, MRC_CTL_EV_FMT_VENDOR_CFG, (-2147483647 - 1));

LC_ENUM_SIZE(mrc_ctl_ev_state, 4);
LC_ENUM(mrc_ctl_ev_state, MRC_CTL_EV_GOOD, 1);
LC_ENUM(mrc_ctl_ev_state, MRC_CTL_EV_ASSUMED_BAD, 2);
LC_ENUM(mrc_ctl_ev_state, MRC_CTL_EV_DENIED, 4);
LC_ENUM(mrc_ctl_ev_state, MRC_CTL_EV_UNKNOWN, (-2147483647 - 1));

LC_ENUM_SIZE(mrc_ctl_ev_mode, 4);
LC_ENUM(mrc_ctl_ev_mode, MRC_CTL_EV_MODE_AUTO, 1);
LC_ENUM(mrc_ctl_ev_mode, MRC_CTL_EV_MODE_EXP, 2);
LC_ENUM(mrc_ctl_ev_mode, MRC_CTL_EV_MODE_GEN, 4);

LC_ENUM_SIZE(mrc_ctl_ev_op, 4);
LC_ENUM(mrc_ctl_ev_op, MRC_CTL_EV_OP_REPLACE_EV, 0);
LC_ENUM(mrc_ctl_ev_op, MRC_CTL_EV_OP_MODIFY_EV_STATE, 1);
LC_ENUM(mrc_ctl_ev_op, MRC_CTL_EV_OP_QUERY_EV_STATE, 2);
LC_ENUM(mrc_ctl_ev_op, MRC_CTL_EV_OP_QUERY_EV_ARRAY, 3);

LC_ENUM_SIZE(mrc_ctl_ev_fields_op, 4);
LC_ENUM(mrc_ctl_ev_fields_op, MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS, 0);
LC_ENUM(mrc_ctl_ev_fields_op, MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS, 1);

LC_ENUM_SIZE(mrc_ctl_ev_profile_attr_mask, 4);
LC_ENUM(mrc_ctl_ev_profile_attr_mask, MRC_CTL_EV_PROFILE_STATE, 1);
LC_ENUM(mrc_ctl_ev_profile_attr_mask, MRC_CTL_EV_PROFILE_CUR_STATE, 2);
LC_ENUM(mrc_ctl_ev_profile_attr_mask, MRC_CTL_EV_PROFILE_MODE, 4);
LC_ENUM(mrc_ctl_ev_profile_attr_mask, MRC_CTL_EV_PROFILE_FMT_ID, 8);
LC_ENUM(mrc_ctl_ev_profile_attr_mask, MRC_CTL_EV_PROFILE_COUNT, 16);
LC_ENUM(mrc_ctl_ev_profile_attr_mask, MRC_CTL_EV_PROFILE_MIN_ACTIVE, 32);
LC_ENUM(mrc_ctl_ev_profile_attr_mask, MRC_CTL_EV_PROFILE_EVENT_MASK, 64);
LC_ENUM(mrc_ctl_ev_profile_attr_mask, MRC_CTL_EV_PROFILE_EV_OP, 128);
LC_ENUM(mrc_ctl_ev_profile_attr_mask, MRC_CTL_EV_PROFILE_EV_FIELDS_OP, 0x100);
LC_ENUM(mrc_ctl_ev_profile_attr_mask, MRC_CTL_EV_PROFILE_VENDOR_CFG, (-2147483647 - 1));

LC_ENUM_SIZE(mrc_ctl_ev_op_flags, 4);
LC_ENUM(mrc_ctl_ev_op_flags, MRC_CTL_EV_OP_F_ALL_COPIES, 1);

LC_ENUM_SIZE(mrc_ctl_cc_profile_attr_mask, 4);
LC_ENUM(mrc_ctl_cc_profile_attr_mask, MRC_CTL_CC_PROFILE_STATE, 1);
LC_ENUM(mrc_ctl_cc_profile_attr_mask, MRC_CTL_CC_PROFILE_CUR_STATE, 2);
LC_ENUM(mrc_ctl_cc_profile_attr_mask, MRC_CTL_CC_PROFILE_ALGORITHM, 4);
LC_ENUM(mrc_ctl_cc_profile_attr_mask, MRC_CTL_CC_PROFILE_CONFIG, 8);
LC_ENUM(mrc_ctl_cc_profile_attr_mask, MRC_CTL_CC_PROFILE_VENDOR_CFG, (-2147483647 - 1));

LC_ENUM_SIZE(mrc_ctl_ep_op_type, 4);
LC_ENUM(mrc_ctl_ep_op_type, MRC_CTL_EP_OP_EV_PROBE, 0);
LC_ENUM(mrc_ctl_ep_op_type, MRC_CTL_EP_OP_PORT_STATUS_UPDATE, 1);


/* ---- macros (checked by the preprocessor, so they must work in #if) ---- */

#if !((MRC_MAX_VENDOR_CFG_SIZE) == 128)
#error "MRC_MAX_VENDOR_CFG_SIZE has the wrong value"
#endif
#if !((MRC_CTL_MAX_VENDOR_CFG_SIZE) == 128)
#error "MRC_CTL_MAX_VENDOR_CFG_SIZE has the wrong value"
#endif
#if !((MRC_CTL_EV_MAX_BYTES) == 32)
#error "MRC_CTL_EV_MAX_BYTES has the wrong value"
#endif
#if !((MRC_API_VER_MAJOR_OFFSET) == 24)
#error "MRC_API_VER_MAJOR_OFFSET has the wrong value"
#endif
#if !((MRC_API_VER_MINOR_OFFSET) == 16)
#error "MRC_API_VER_MINOR_OFFSET has the wrong value"
#endif
#if !((MRC_API_VER_SUBMINOR_OFFSET) == 0)
#error "MRC_API_VER_SUBMINOR_OFFSET has the wrong value"
#endif
#if !((MRC_API_VER(1, 2, 3)) == 0x1020003)
#error "MRC_API_VER(1, 2, 3) has the wrong value"
#endif
#if !((MRC_API_VER(0xAB, 0xCD, 0xEF01)) == 0xabcdef01)
#error "MRC_API_VER(0xAB, 0xCD, 0xEF01) has the wrong value"
#endif
#if !((MRC_API_VER_LATEST) == 0xffffffff)
#error "MRC_API_VER_LATEST has the wrong value"
#endif
#if !((MRC_API_CURRENT_VERSION) == 0x1000001)
#error "MRC_API_CURRENT_VERSION has the wrong value"
#endif
#if !((MRC_API_LAST_SUPPORTED_VERSION) == 0)
#error "MRC_API_LAST_SUPPORTED_VERSION has the wrong value"
#endif
#if !((MRC_VENDOR_API_CURRENT_VERSION) == 0x1000000)
#error "MRC_VENDOR_API_CURRENT_VERSION has the wrong value"
#endif
#if !((MRC_VENDOR_API_LAST_SUPPORTED_VERSION) == 0)
#error "MRC_VENDOR_API_LAST_SUPPORTED_VERSION has the wrong value"
#endif
#if !((MRC_VENDOR_API_VER_USED) == 0x1000000)
#error "MRC_VENDOR_API_VER_USED has the wrong value"
#endif
#if !((MRC_CTL_API_VER_MAJOR_OFFSET) == 24)
#error "MRC_CTL_API_VER_MAJOR_OFFSET has the wrong value"
#endif
#if !((MRC_CTL_API_VER_MINOR_OFFSET) == 16)
#error "MRC_CTL_API_VER_MINOR_OFFSET has the wrong value"
#endif
#if !((MRC_CTL_API_VER_SUBMINOR_OFFSET) == 0)
#error "MRC_CTL_API_VER_SUBMINOR_OFFSET has the wrong value"
#endif
#if !((MRC_CTL_API_VER(1, 2, 3)) == 0x1020003)
#error "MRC_CTL_API_VER(1, 2, 3) has the wrong value"
#endif
#if !((MRC_CTL_API_VER(0xAB, 0xCD, 0xEF01)) == 0xabcdef01)
#error "MRC_CTL_API_VER(0xAB, 0xCD, 0xEF01) has the wrong value"
#endif
#if !((MRC_CTL_API_VER_LATEST) == 0xffffffff)
#error "MRC_CTL_API_VER_LATEST has the wrong value"
#endif
#if !((MRC_CTL_API_CURRENT_VERSION) == 0x1000001)
#error "MRC_CTL_API_CURRENT_VERSION has the wrong value"
#endif
#if !((MRC_CTL_API_LAST_SUPPORTED_VERSION) == 0)
#error "MRC_CTL_API_LAST_SUPPORTED_VERSION has the wrong value"
#endif
#if !((MRC_CTL_VENDOR_API_CURRENT_VERSION) == 0x1000000)
#error "MRC_CTL_VENDOR_API_CURRENT_VERSION has the wrong value"
#endif
#if !((MRC_CTL_VENDOR_API_LAST_SUPPORTED_VERSION) == 0)
#error "MRC_CTL_VENDOR_API_LAST_SUPPORTED_VERSION has the wrong value"
#endif
#if !((MRC_CTL_VENDOR_API_VER_USED) == 0x1000000)
#error "MRC_CTL_VENDOR_API_VER_USED has the wrong value"
#endif

/* Unless chosen on the command line, the selected versions are the current
 * ones; a chosen version never exceeds them. */
#if defined(LC_API_VER_DEFAULTED) && MRC_API_VER_USED != 0x01000001
#error "MRC_API_VER_USED should default to 1.0.1"
#endif
#if MRC_API_VER_USED > 0x01000001
#error "MRC_API_VER_USED above the current version"
#endif
#if defined(LC_CTL_API_VER_DEFAULTED) && MRC_CTL_API_VER_USED != 0x01000001
#error "MRC_CTL_API_VER_USED should default to 1.0.1"
#endif
#if MRC_CTL_API_VER_USED > 0x01000001
#error "MRC_CTL_API_VER_USED above the current version"
#endif

/* The same macros as C constant expressions. */
static_assert(MRC_API_CURRENT_VERSION == 0x01000001, "MRC_API_CURRENT_VERSION");
static_assert(MRC_CTL_API_CURRENT_VERSION == 0x01000001, "MRC_CTL_API_CURRENT_VERSION");
static_assert(MRC_VENDOR_API_CURRENT_VERSION == 0x01000000, "MRC_VENDOR_API_CURRENT_VERSION");
static_assert(MRC_CTL_VENDOR_API_CURRENT_VERSION == 0x01000000, "MRC_CTL_VENDOR_API_CURRENT_VERSION");
static_assert(sizeof(((struct mrc_qp_attr *)0)->vendor_cfg) == MRC_MAX_VENDOR_CFG_SIZE, "vendor_cfg size");
static_assert(sizeof(mrc_ctl_ev_t) == MRC_CTL_EV_MAX_BYTES, "EV size");

/* MRC_CTL_EV_UNPOPULATED must be an expression of type struct mrc_ctl_ev. */
struct mrc_ctl_ev lc_unpopulated(void);
struct mrc_ctl_ev lc_unpopulated(void)
{
	return MRC_CTL_EV_UNPOPULATED;
}

/* ---- functions ----
 * Each pointer is initialised from the API function, so any difference in
 * return or parameter types is a compile error (with -Werror in C), and the
 * static_assert demands the exact same type. Functions added in 1.0.1 must
 * be absent from the 1.0.0 view: reusing the name as a typedef would clash
 * with a declaration.
 */
#define LC_FN_EXACT(name) \
	static_assert(LC_SAME_TYPE(LC_TYPEOF(lc_p_##name), LC_TYPEOF(&name)), #name " signature")

#if MRC_API_VER_USED >= MRC_API_VER(1, 0, 1)
int (*lc_p_mrc_query_device_ex)(struct ibv_context *, struct mrc_context *, struct mrc_device_attr *, int *) = mrc_query_device_ex;
LC_FN_EXACT(mrc_query_device_ex);
#else
typedef int mrc_query_device_ex;
#endif
int (*lc_p_mrc_query_device)(struct ibv_context *, struct mrc_device_attr *, int *) = mrc_query_device;
LC_FN_EXACT(mrc_query_device);
void (*lc_p_mrc_query_version)(uint32_t *, uint32_t *, uint32_t *, uint32_t *) = mrc_query_version;
LC_FN_EXACT(mrc_query_version);
struct mrc_context *(*lc_p_mrc_create_context)(struct ibv_context *, struct mrc_context_attr *) = mrc_create_context;
LC_FN_EXACT(mrc_create_context);
int (*lc_p_mrc_destroy_context)(struct mrc_context *) = mrc_destroy_context;
LC_FN_EXACT(mrc_destroy_context);
int (*lc_p_mrc_create_comp_channel)(struct mrc_context *, struct mrc_comp_channel **) = mrc_create_comp_channel;
LC_FN_EXACT(mrc_create_comp_channel);
int (*lc_p_mrc_get_comp_channel_fd)(struct mrc_comp_channel *, int *) = mrc_get_comp_channel_fd;
LC_FN_EXACT(mrc_get_comp_channel_fd);
int (*lc_p_mrc_destroy_comp_channel)(struct mrc_comp_channel *) = mrc_destroy_comp_channel;
LC_FN_EXACT(mrc_destroy_comp_channel);
struct mrc_cq *(*lc_p_mrc_create_cq)(struct mrc_context *, int, void *, struct mrc_comp_channel *, int) = mrc_create_cq;
LC_FN_EXACT(mrc_create_cq);
int (*lc_p_mrc_poll_cq)(struct mrc_cq *, int, struct ibv_wc *) = mrc_poll_cq;
LC_FN_EXACT(mrc_poll_cq);
int (*lc_p_mrc_destroy_cq)(struct mrc_cq *) = mrc_destroy_cq;
LC_FN_EXACT(mrc_destroy_cq);
struct mrc_qp_hint *(*lc_p_mrc_create_qp_hint)(struct mrc_context *, struct mrc_qp_hint_init_attr *) = mrc_create_qp_hint;
LC_FN_EXACT(mrc_create_qp_hint);
int (*lc_p_mrc_destroy_qp_hint)(struct mrc_qp_hint *) = mrc_destroy_qp_hint;
LC_FN_EXACT(mrc_destroy_qp_hint);
int (*lc_p_mrc_query_qp_hint)(struct mrc_qp_hint *, struct mrc_qp_hint_attr *, int) = mrc_query_qp_hint;
LC_FN_EXACT(mrc_query_qp_hint);
int (*lc_p_mrc_modify_qp_hint)(struct mrc_qp_hint *, struct mrc_qp_hint_attr *, int) = mrc_modify_qp_hint;
LC_FN_EXACT(mrc_modify_qp_hint);
struct mrc_qp *(*lc_p_mrc_create_qp)(struct mrc_context *, struct mrc_qp_init_attr *) = mrc_create_qp;
LC_FN_EXACT(mrc_create_qp);
int (*lc_p_mrc_destroy_qp)(struct mrc_qp *) = mrc_destroy_qp;
LC_FN_EXACT(mrc_destroy_qp);
int (*lc_p_mrc_query_qp)(struct mrc_qp *, struct ibv_qp_attr *, int, struct mrc_qp_attr *, int, struct mrc_qp_init_attr *) = mrc_query_qp;
LC_FN_EXACT(mrc_query_qp);
int (*lc_p_mrc_modify_qp)(struct mrc_qp *, struct ibv_qp_attr *, int, struct mrc_qp_attr *, int) = mrc_modify_qp;
LC_FN_EXACT(mrc_modify_qp);
int (*lc_p_mrc_get_qpn)(struct mrc_qp *, uint32_t *) = mrc_get_qpn;
LC_FN_EXACT(mrc_get_qpn);
int (*lc_p_mrc_post_recv)(struct mrc_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **) = mrc_post_recv;
LC_FN_EXACT(mrc_post_recv);
int (*lc_p_mrc_post_send)(struct mrc_qp *, struct ibv_send_wr *, struct ibv_send_wr **) = mrc_post_send;
LC_FN_EXACT(mrc_post_send);
int (*lc_p_mrc_get_async_event)(struct mrc_context *, struct mrc_async_event *) = mrc_get_async_event;
LC_FN_EXACT(mrc_get_async_event);
void (*lc_p_mrc_ack_async_event)(struct mrc_async_event *) = mrc_ack_async_event;
LC_FN_EXACT(mrc_ack_async_event);
int (*lc_p_mrc_req_notify_cq)(struct mrc_cq *, int) = mrc_req_notify_cq;
LC_FN_EXACT(mrc_req_notify_cq);
int (*lc_p_mrc_get_cq_event)(struct mrc_comp_channel *, struct mrc_cq **, void **) = mrc_get_cq_event;
LC_FN_EXACT(mrc_get_cq_event);
void (*lc_p_mrc_ack_cq_events)(struct mrc_cq *, unsigned int) = mrc_ack_cq_events;
LC_FN_EXACT(mrc_ack_cq_events);
#if MRC_CTL_API_VER_USED >= MRC_CTL_API_VER(1, 0, 1)
int (*lc_p_mrc_ctl_query_device_ex)(struct ibv_context *, struct mrc_context *, struct mrc_ctl_device_attr *, int *) = mrc_ctl_query_device_ex;
LC_FN_EXACT(mrc_ctl_query_device_ex);
#else
typedef int mrc_ctl_query_device_ex;
#endif
int (*lc_p_mrc_ctl_query_device)(struct ibv_context *, struct mrc_ctl_device_attr *) = mrc_ctl_query_device;
LC_FN_EXACT(mrc_ctl_query_device);
void (*lc_p_mrc_ctl_query_version)(uint32_t *, uint32_t *, uint32_t *, uint32_t *) = mrc_ctl_query_version;
LC_FN_EXACT(mrc_ctl_query_version);
int (*lc_p_mrc_ctl_query_port)(struct mrc_context *, uint8_t, struct mrc_ctl_port_attr *, int) = mrc_ctl_query_port;
LC_FN_EXACT(mrc_ctl_query_port);
int (*lc_p_mrc_ctl_modify_port)(struct mrc_context *, uint8_t, struct mrc_ctl_port_attr *, int) = mrc_ctl_modify_port;
LC_FN_EXACT(mrc_ctl_modify_port);
int (*lc_p_mrc_ctl_modify_ev_fmt_profile)(struct mrc_context *, uint64_t, struct mrc_ctl_ev_fmt_profile_attr *, int) = mrc_ctl_modify_ev_fmt_profile;
LC_FN_EXACT(mrc_ctl_modify_ev_fmt_profile);
int (*lc_p_mrc_ctl_query_ev_fmt_profile)(struct mrc_context *, uint64_t, struct mrc_ctl_ev_fmt_profile_attr *, int) = mrc_ctl_query_ev_fmt_profile;
LC_FN_EXACT(mrc_ctl_query_ev_fmt_profile);
int (*lc_p_mrc_ctl_modify_ev_profile)(struct mrc_context *, uint64_t, struct mrc_ctl_ev_profile_attr *, int) = mrc_ctl_modify_ev_profile;
LC_FN_EXACT(mrc_ctl_modify_ev_profile);
int (*lc_p_mrc_ctl_query_ev_profile)(struct mrc_context *, uint64_t, struct mrc_ctl_ev_profile_attr *, int) = mrc_ctl_query_ev_profile;
LC_FN_EXACT(mrc_ctl_query_ev_profile);
int (*lc_p_mrc_ctl_modify_cc_profile)(struct mrc_context *, uint64_t, struct mrc_ctl_cc_profile_attr *, int) = mrc_ctl_modify_cc_profile;
LC_FN_EXACT(mrc_ctl_modify_cc_profile);
int (*lc_p_mrc_ctl_query_cc_profile)(struct mrc_context *, uint64_t, struct mrc_ctl_cc_profile_attr *, int) = mrc_ctl_query_cc_profile;
LC_FN_EXACT(mrc_ctl_query_cc_profile);
struct mrc_cq *(*lc_p_mrc_ctl_create_ev_event_cq)(struct mrc_context *, int, void *, struct mrc_comp_channel *, int) = mrc_ctl_create_ev_event_cq;
LC_FN_EXACT(mrc_ctl_create_ev_event_cq);
int (*lc_p_mrc_ctl_poll_ev_event)(struct mrc_cq *, int, struct mrc_ctl_ev_event *) = mrc_ctl_poll_ev_event;
LC_FN_EXACT(mrc_ctl_poll_ev_event);
int (*lc_p_mrc_ctl_ep_batch_send_wait)(struct mrc_context *, uint8_t, enum mrc_ctl_ep_op_type, struct mrc_ctl_ep_req *, int, uint32_t, struct mrc_ctl_ep_rsp *, int *) = mrc_ctl_ep_batch_send_wait;
LC_FN_EXACT(mrc_ctl_ep_batch_send_wait);

int main(void)
{
	return 0;
}
