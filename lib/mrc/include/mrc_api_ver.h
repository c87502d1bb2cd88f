/*
 * mrcnic's declaration of the OCP MRC API version macros (mrc_api_ver.h),
 * written from the published interface. Included by mrc.h.
 */

#ifndef MRCNIC_MRC_API_VER_H
#define MRCNIC_MRC_API_VER_H

/*
 * A version is packed into one 32-bit value: major in bits 31..24, minor in
 * bits 23..16, subminor in bits 15..0. A major bump breaks compatibility, a
 * minor bump only adds, a subminor bump changes nothing visible.
 */
#define MRC_API_VER_MAJOR_OFFSET        24
#define MRC_API_VER_MINOR_OFFSET        16
#define MRC_API_VER_SUBMINOR_OFFSET     0

/* Usable both in C expressions and in #if. */
#define MRC_API_VER(_major, _minor, _sub_minor) \
	(((_major) << MRC_API_VER_MAJOR_OFFSET) | \
	 ((_minor) << MRC_API_VER_MINOR_OFFSET) | \
	 ((_sub_minor) << MRC_API_VER_SUBMINOR_OFFSET))

/* Define MRC_API_VER_USED to this to mean "whatever this header provides". */
#define MRC_API_VER_LATEST              MRC_API_VER(0xFF, 0xFF, 0xFFFF)

/* Newest version these headers describe, and oldest one still accepted. */
#define MRC_API_CURRENT_VERSION         MRC_API_VER(1, 0, 1)
#define MRC_API_LAST_SUPPORTED_VERSION  MRC_API_VER(0, 0, 0)

/*
 * MRC_API_VER_USED is the version the program was written for. It may be
 * defined before inclusion; left undefined (or set to MRC_API_VER_LATEST)
 * it becomes MRC_API_CURRENT_VERSION. Declarations added after 1.0.0 are
 * visible only when it is high enough.
 */
#ifndef MRC_API_VER_USED
#define MRC_API_VER_USED MRC_API_CURRENT_VERSION
#elif MRC_API_VER_USED == MRC_API_VER_LATEST
#undef MRC_API_VER_USED
#define MRC_API_VER_USED MRC_API_CURRENT_VERSION
#endif

#if MRC_API_VER_USED > MRC_API_CURRENT_VERSION
#error "MRC_API_VER_USED names a version newer than these headers provide"
#elif MRC_API_VER_USED < MRC_API_LAST_SUPPORTED_VERSION
#error "MRC_API_VER_USED names a version older than the oldest one supported"
#elif MRC_API_VER_USED == MRC_API_LAST_SUPPORTED_VERSION
#warning "MRC_API_VER_USED is the oldest supported version and may be dropped"
#endif

/*
 * The provider's vendor-specific surface carries its own version, packed the
 * same way and selected the same way through MRC_VENDOR_API_VER_USED.
 */
#define MRC_VENDOR_API_CURRENT_VERSION         MRC_API_VER(1, 0, 0)
#define MRC_VENDOR_API_LAST_SUPPORTED_VERSION  MRC_API_VER(0, 0, 0)

#ifndef MRC_VENDOR_API_VER_USED
#define MRC_VENDOR_API_VER_USED MRC_VENDOR_API_CURRENT_VERSION
#elif MRC_VENDOR_API_VER_USED == MRC_API_VER_LATEST
#undef MRC_VENDOR_API_VER_USED
#define MRC_VENDOR_API_VER_USED MRC_VENDOR_API_CURRENT_VERSION
#endif

#if MRC_VENDOR_API_VER_USED > MRC_VENDOR_API_CURRENT_VERSION
#error "MRC_VENDOR_API_VER_USED names a version newer than these headers provide"
#elif MRC_VENDOR_API_VER_USED < MRC_VENDOR_API_LAST_SUPPORTED_VERSION
#error "MRC_VENDOR_API_VER_USED names a version older than the oldest one supported"
#elif MRC_VENDOR_API_VER_USED == MRC_VENDOR_API_LAST_SUPPORTED_VERSION
#warning "MRC_VENDOR_API_VER_USED is the oldest supported version and may be dropped"
#endif

#endif /* MRCNIC_MRC_API_VER_H */
