/*
 * mrcnic's declaration of the OCP MRC controller API version macros
 * (mrc_ctl_api_ver.h), written from the published interface. Included by
 * mrc_ctl.h. The controller API is versioned apart from the application API
 * in mrc_api_ver.h, with the same packing.
 */

#ifndef MRCNIC_MRC_CTL_API_VER_H
#define MRCNIC_MRC_CTL_API_VER_H

/*
 * A version is packed into one 32-bit value: major in bits 31..24, minor in
 * bits 23..16, subminor in bits 15..0. A major bump breaks compatibility, a
 * minor bump only adds, a subminor bump changes nothing visible.
 */
#define MRC_CTL_API_VER_MAJOR_OFFSET        24
#define MRC_CTL_API_VER_MINOR_OFFSET        16
#define MRC_CTL_API_VER_SUBMINOR_OFFSET     0

/* Usable both in C expressions and in #if. */
#define MRC_CTL_API_VER(_major, _minor, _sub_minor) \
	(((_major) << MRC_CTL_API_VER_MAJOR_OFFSET) | \
	 ((_minor) << MRC_CTL_API_VER_MINOR_OFFSET) | \
	 ((_sub_minor) << MRC_CTL_API_VER_SUBMINOR_OFFSET))

/* Define MRC_CTL_API_VER_USED to this to mean "whatever this header has". */
#define MRC_CTL_API_VER_LATEST              MRC_CTL_API_VER(0xFF, 0xFF, 0xFFFF)

/* Newest version these headers describe, and oldest one still accepted. */
#define MRC_CTL_API_CURRENT_VERSION         MRC_CTL_API_VER(1, 0, 1)
#define MRC_CTL_API_LAST_SUPPORTED_VERSION  MRC_CTL_API_VER(0, 0, 0)

/*
 * MRC_CTL_API_VER_USED is the version the program was written for. It may be
 * defined before inclusion; left undefined (or set to MRC_CTL_API_VER_LATEST)
 * it becomes MRC_CTL_API_CURRENT_VERSION. Declarations added after 1.0.0 are
 * visible only when it is high enough.
 */
#ifndef MRC_CTL_API_VER_USED
#define MRC_CTL_API_VER_USED MRC_CTL_API_CURRENT_VERSION
#elif MRC_CTL_API_VER_USED == MRC_CTL_API_VER_LATEST
#undef MRC_CTL_API_VER_USED
#define MRC_CTL_API_VER_USED MRC_CTL_API_CURRENT_VERSION
#endif

#if MRC_CTL_API_VER_USED > MRC_CTL_API_CURRENT_VERSION
#error "MRC_CTL_API_VER_USED names a version newer than these headers provide"
#elif MRC_CTL_API_VER_USED < MRC_CTL_API_LAST_SUPPORTED_VERSION
#error "MRC_CTL_API_VER_USED names a version older than the oldest one supported"
#elif MRC_CTL_API_VER_USED == MRC_CTL_API_LAST_SUPPORTED_VERSION
#warning "MRC_CTL_API_VER_USED is the oldest supported version and may be dropped"
#endif

/*
 * The provider's vendor-specific surface carries its own version, packed the
 * same way and selected the same way through MRC_CTL_VENDOR_API_VER_USED.
 */
#define MRC_CTL_VENDOR_API_CURRENT_VERSION         MRC_CTL_API_VER(1, 0, 0)
#define MRC_CTL_VENDOR_API_LAST_SUPPORTED_VERSION  MRC_CTL_API_VER(0, 0, 0)

#ifndef MRC_CTL_VENDOR_API_VER_USED
#define MRC_CTL_VENDOR_API_VER_USED MRC_CTL_VENDOR_API_CURRENT_VERSION
#elif MRC_CTL_VENDOR_API_VER_USED == MRC_CTL_API_VER_LATEST
#undef MRC_CTL_VENDOR_API_VER_USED
#define MRC_CTL_VENDOR_API_VER_USED MRC_CTL_VENDOR_API_CURRENT_VERSION
#endif

#if MRC_CTL_VENDOR_API_VER_USED > MRC_CTL_VENDOR_API_CURRENT_VERSION
#error "MRC_CTL_VENDOR_API_VER_USED names a version newer than these headers provide"
#elif MRC_CTL_VENDOR_API_VER_USED < MRC_CTL_VENDOR_API_LAST_SUPPORTED_VERSION
#error "MRC_CTL_VENDOR_API_VER_USED names a version older than the oldest one supported"
#elif MRC_CTL_VENDOR_API_VER_USED == MRC_CTL_VENDOR_API_LAST_SUPPORTED_VERSION
#warning "MRC_CTL_VENDOR_API_VER_USED is the oldest supported version and may be dropped"
#endif

#endif /* MRCNIC_MRC_CTL_API_VER_H */
