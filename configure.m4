# -*- shell-script -*-
#
# usnic-rs inside an Open MPI 4.1 source tree, at opal/mca/btl/usnic (replacing the C
# component): configure's part, read by Open MPI's autogen.pl. Makefile.am builds the plugin.
#
# The plugin is the Rust crate's cdylib, so it can only be a DSO, and configure checks what
# cargo's build needs: cargo itself, and libfabric's headers (API 1.17 or later) where Open
# MPI's OFI check finds them. bindgen's libclang is found by bindgen at build time.

# Never linked into libopen-pal: libtool does not build it.
AC_DEFUN([MCA_opal_btl_usnic_COMPILE_MODE], [
    AC_MSG_CHECKING([for MCA component $2:$3 compile mode])
    $4="dso"
    AC_MSG_RESULT([$$4])
])

# MCA_opal_btl_usnic_CONFIG([action-if-can-compile], [action-if-cant-compile])
AC_DEFUN([MCA_opal_btl_usnic_CONFIG],[
    AC_CONFIG_FILES([opal/mca/btl/usnic/Makefile])

    AC_ARG_WITH([usnic],
                [AS_HELP_STRING([--with-usnic],
                                [If specified, fail when the usnic BTL (usnic-rs, built
                                 with cargo over libfabric FI_EP_DGRAM endpoints) cannot
                                 be built])])
    AC_ARG_VAR([CARGO], [cargo, to build the usnic BTL (usnic-rs)])

    OPAL_VAR_SCOPE_PUSH([btl_usnic_happy])
    btl_usnic_happy=yes
    AS_IF([test "x$with_usnic" = "xno"], [btl_usnic_happy=no])

    # The wire format and the Open MPI edge assume 64-bit Linux, as the C original did.
    AS_IF([test "$btl_usnic_happy" = yes],
          [AC_CHECK_SIZEOF([void *])
           AC_MSG_CHECKING([for 64 bit Linux])
           AS_CASE([$host_os],
                   [*linux*], [AS_IF([test "$ac_cv_sizeof_void_p" -eq 8], [], [btl_usnic_happy=no])],
                   [btl_usnic_happy=no])
           AC_MSG_RESULT([$btl_usnic_happy])])

    # rustup installs cargo in ~/.cargo/bin, which a login shell may not have on its PATH.
    AS_IF([test "$btl_usnic_happy" = yes],
          [AC_PATH_PROG([CARGO], [cargo], [no], [$PATH$PATH_SEPARATOR$HOME/.cargo/bin])
           AS_IF([test "$CARGO" = no], [btl_usnic_happy=no])])

    AS_IF([test "$btl_usnic_happy" = yes],
          [OPAL_CHECK_OFI
           btl_usnic_happy=$opal_ofi_happy])
    AS_IF([test "$btl_usnic_happy" = yes],
          [OPAL_CHECK_OFI_VERSION_GE([1,17], [], [btl_usnic_happy=no])])

    AS_IF([test "$btl_usnic_happy" = yes],
          [$1],
          [AS_IF([test "x$with_usnic" = "xyes"],
                 [AC_MSG_WARN([--with-usnic was given, but the usnic BTL cannot be built (it needs 64-bit Linux, cargo and libfabric >= 1.17)])
                  AC_MSG_ERROR([Cannot continue])],
                 [$2])])

    OPAL_SUMMARY_ADD([[Transports]], [[usNIC / UDP datagrams (usnic-rs)]], [[btl_usnic]], [$btl_usnic_happy])
    OPAL_VAR_SCOPE_POP
])dnl
