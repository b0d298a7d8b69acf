# shellcheck shell=bash
# The Slurm releases slurm-budget builds and tests for, and their pins.
# Owns: which releases exist and where each one's binaries come from
#   22.05  this Debian 12 machine's own packages;
#   24.11  Debian 13 "trixie" packages in a debootstrap root (rootfs.sh);
#   25.11, 26.05  built from SchedMD's release tarball (sha256-pinned) into a prefix in the
#          cache, daemons, clients and stock plugins from the same tree as our plugins
#          (sb_release_build below);
# the exact version each is pinned to, the Slurm version number a plugin must carry for
# it, and where its source comes from.
# Sourced by scripts/lib/rootfs.sh, scripts/setup, scripts/testbed, scripts/test.

# Releases in test order; the first is the default of TESTBED_SLURM and scripts/setup.
SB_RELEASES=(22.05 24.11 25.11 26.05)
SB_DEFAULT_RELEASE=22.05

# Releases whose testbed runs accounting (TESTBED_ACCOUNTING=1: MariaDB + slurmdbd):
# 22.05 this machine's packages mariadb-server and slurmdbd, 24.11 its root's
# (rootfs.sh installs them), 25.11 and 26.05 their source build's slurmdbd (configured
# with MariaDB's client library, SB_SRC_CONFIGURE) beside this machine's MariaDB.
# testbed-tests' ACCOUNTING_SLURM_RELEASES lists the same.
SB_ACCOUNTING_RELEASES=(22.05 24.11 25.11 26.05)

# Debian suite the root of a release is made from (22.05: the host itself).
declare -A SB_REL_SUITE=([24.11]=trixie)
# Exact slurm-wlm package version installed in the root. When the archive no longer has
# this version, building a NEW root fails with a clear message (a cached root keeps
# working); bump the pin and the source pin together.
declare -A SB_REL_DEB=([24.11]=24.11.5-4+deb13u1)
# SLURM_VERSION_NUMBER of that package: plugin_version must equal it exactly.
declare -A SB_REL_VERNUM=([24.11]=0x180b05)
# Source of a root release: Debian's copy of the upstream tarball (the mirror 404s the
# .dsc and Debian's patches, so none are applied; Debian 13 ships none that touch the
# plugin interfaces' structs).
declare -A SB_REL_SRC_URL=(
    [24.11]=pool/main/s/slurm-wlm/slurm-wlm_24.11.5.orig.tar.gz
)
declare -A SB_REL_SRC_FILE=(
    [24.11]=slurm-wlm_24.11.5.orig.tar.gz
)
declare -A SB_REL_SRC_SHA256=(
    [24.11]=e1a5547edd212c38b5e3230a284133f777b32746551f094aaa81cc4af375e332
)

# Releases built from SchedMD's release tarballs (git archive of the release tag, kept in
# ../shared/slurm-src; see its SOURCES.md): the tarball, its sha256, its exact version.
# No mirror reachable here serves Debian's 26.05 source, and a plugin built from another
# tree does not match a Debian binary's struct layout; built from the same tarball, the
# daemons and the plugins match by construction.
declare -A SB_REL_TARBALL=(
    [25.11]=slurm-25.11.7.tar.xz
    [26.05]=slurm-26.05.3.tar.xz
)
declare -A SB_REL_TARBALL_SHA256=(
    [25.11]=f71f1e5f33a72e7864104a6857e86862eac3c4e5e348c92dd0c10dbe03a82dec
    [26.05]=b7c7c7c8d78f7fde485ac7fc811034c5dd1a067d0167dba1a044e731c0374b13
)
declare -A SB_REL_UPSTREAM=([25.11]=25.11.7 [26.05]=26.05.3)
# configure: what the testbed needs and nothing a site would lack. No
# --enable-multiple-slurmd (sites build without it; the testbed gives every node its own
# NodeHostname instead); auth/none and cred/none are built by default. --with-json
# (libjson-c): without it configure only warns and skips serializer/json, and every
# `--json` client call fails ("serializer_required: could not find plugin for
# application/json"): budgetd's drain worker reads `squeue --json`.
# --with-mysql_config (the folder holding mariadb_config, from libmariadb-dev): slurmdbd's
# accounting_storage/mysql, which the testbed's accounting (TESTBED_ACCOUNTING=1) needs;
# without it configure only warns and builds slurmdbd with no storage plugin.
SB_SRC_CONFIGURE=(--disable-debug --with-json --with-mysql_config=/usr/bin)

# 0 if $1 is a release we know.
sb_release_known() {
    local r
    for r in "${SB_RELEASES[@]}"; do [[ "$r" == "$1" ]] && return 0; done
    return 1
}

# Dies unless $1 is a known release.
sb_release_check() {
    sb_release_known "$1" || sb_die "unknown Slurm release '$1' (known: ${SB_RELEASES[*]})"
}

# 0 if the testbed of release $1 can run accounting (SB_ACCOUNTING_RELEASES).
sb_release_has_accounting() {
    local r
    for r in "${SB_ACCOUNTING_RELEASES[@]}"; do [[ "$r" == "$1" ]] && return 0; done
    return 1
}

# 0 if release $1 runs from a debootstrap root (not the host's own packages).
sb_release_in_root() { [[ -n "${SB_REL_SUITE[$1]:-}" ]]; }

# 0 if release $1 is built from SchedMD's release tarball into a prefix in the cache.
sb_release_from_source() { [[ -n "${SB_REL_TARBALL[$1]:-}" ]]; }

# 0 if release $1 is not this machine's own packages (its plugins go to target/slurm-V).
sb_release_secondary() { [[ "$1" != "$SB_DEFAULT_RELEASE" ]]; }

# Folder of one source build: builds/<exact version>/{src/slurm-<version>,prefix,*.log}.
sb_build_dir() { printf '%s/builds/%s\n' "$(sb_cache_dir)" "$1"; }

# Install prefix of a source-built release (bin/, sbin/, lib/slurm/, include/slurm/).
sb_release_prefix() { printf '%s/prefix\n' "$(sb_build_dir "${SB_REL_UPSTREAM[$1]}")"; }

# The pinned tarball of a source-built release $1, copied into the cache (so a cached
# build survives without ../shared) and checked against its sha256; prints its path.
sb_release_tarball() {
    local rel="$1" file dl sum shared
    file="${SB_REL_TARBALL[$rel]}"
    dl="$(sb_cache_dir)/dl"
    mkdir -p "$dl"
    if [[ ! -f "$dl/$file" ]]; then
        shared="$SB_ROOT/../shared/slurm-src/$file"
        [[ -f "$shared" ]] || sb_die "$file not found in ../shared/slurm-src (SchedMD's Slurm ${SB_REL_UPSTREAM[$rel]} release tarball): put it there or in $dl"
        cp "$shared" "$dl/$file.part" && mv "$dl/$file.part" "$dl/$file"
    fi
    sum="$(sha256sum "$dl/$file" | cut -d' ' -f1)"
    [[ "$sum" == "${SB_REL_TARBALL_SHA256[$rel]}" ]] \
        || { rm -f "$dl/$file"; sb_die "$file: sha256 $sum, pinned ${SB_REL_TARBALL_SHA256[$rel]}: refusing it"; }
    printf '%s\n' "$dl/$file"
}

# Prints the version (Major.Minor.Micro of META) of the Slurm tree $1.
sb_src_version() {
    awk '$1 == "Major:" {ma = $2} $1 == "Minor:" {mi = $2} $1 == "Micro:" {mc = $2}
         END {if (ma != "") printf "%s.%02d.%s\n", ma, mi, mc}' "$1/META"
}

# Unpacks (tarball) or copies (folder) Slurm source $1 into folder $2 (made empty first)
# and prints the tree's path (the tarball's top folder).
sb_src_unpack() {
    local src="$1" into="$2" top
    rm -rf "$into"; mkdir -p "$into"
    if [[ -d "$src" ]]; then
        top="$into/$(basename "$src")"
        cp -a "$src" "$top"
    else
        tar -xf "$src" -C "$into" || sb_die "cannot unpack $src"
        top="$(find "$into" -mindepth 1 -maxdepth 1 -type d | head -n1)"
    fi
    [[ -f "$top/META" ]] || sb_die "$src: no META in $top: not a Slurm source tree"
    printf '%s\n' "$top"
}

# Builds Slurm from source (once, cached): unpack, configure --prefix into the build
# folder, make -j<cores>, make install. $1 release, $2 the source (tarball or folder),
# $3 the build folder, $4 "install" to build and install the daemons, "configure" to stop
# after configure (a site's own tree: only config.h and slurm_version.h are needed for
# the plugins). Idempotent: a finished build (marker holding the source's identity and
# the configure line) is reused. Prints the configured source tree. Logs in $3/*.log.
sb_src_build() {
    local rel="$1" src="$2" dir="$3" mode="$4" id marker tree t0 t1 t2 t3 lock
    marker="$dir/.slurm-budget-$mode"
    if [[ -f "$src" ]]; then
        id="$(sha256sum "$src" | cut -d' ' -f1)"
    else
        id="dir:$(readlink -f "$src")"
    fi
    id+=" configure: ${SB_SRC_CONFIGURE[*]}"
    mkdir -p "$dir"
    # One builder at a time per folder (scripts/test, a suite and a developer may race).
    exec {lock}>"$dir.lock"
    flock "$lock"
    if [[ -f "$marker" && "$(head -n1 "$marker")" == "$id" ]]; then
        sed -n 2p "$marker"
        exec {lock}>&-
        return 0
    fi
    rm -f "$dir"/.slurm-budget-*
    t0=$(date +%s)
    tree="$(sb_src_unpack "$src" "$dir/src")"
    sb_src_layout_check "$tree" "$rel"
    sb_log "configure Slurm $(sb_src_version "$tree") ($tree, --prefix=$dir/prefix ${SB_SRC_CONFIGURE[*]}; log $dir/configure.log)"
    (cd "$tree" && ./configure --prefix="$dir/prefix" --sysconfdir="$dir/prefix/etc" \
        "${SB_SRC_CONFIGURE[@]}") >"$dir/configure.log" 2>&1 \
        || sb_die "configure failed, see $dir/configure.log: $(tail -n 3 "$dir/configure.log")"
    t1=$(date +%s)
    if [[ "$mode" == install ]]; then
        sb_log "make -j$(nproc) (the longest step: 12-15 min on 2 idle cores; log $dir/make.log)"
        (cd "$tree" && make -j"$(nproc)") >"$dir/make.log" 2>&1 \
            || sb_die "make failed, see $dir/make.log: $(tail -n 5 "$dir/make.log")"
        t2=$(date +%s)
        rm -rf "$dir/prefix"
        (cd "$tree" && make install) >"$dir/install.log" 2>&1 \
            || sb_die "make install failed, see $dir/install.log"
        t3=$(date +%s)
        sb_log "Slurm $(sb_src_version "$tree") built into $dir/prefix: configure $((t1 - t0)) s, make $((t2 - t1)) s, install $((t3 - t2)) s"
    fi
    printf '%s\n%s\n' "$id" "$tree" > "$marker"
    exec {lock}>&-
    printf '%s\n' "$tree"
}

# Makes sure source-built release $1 is built and installed (pinned tarball) and prints
# its configured source tree, the SLURM_SRC_DIR of its plugins.
sb_release_build() {
    local rel="$1" tarball
    tarball="$(sb_release_tarball "$rel")"
    sb_src_build "$rel" "$tarball" "$(sb_build_dir "${SB_REL_UPSTREAM[$rel]}")" install
}

# A site's own SchedMD tarball or tree $2 of release series $1: configured only (its
# daemons are the site's), in a folder named after its version and identity; prints the
# tree. Plugins built against it carry that tree's exact version.
sb_site_src_prepare() {
    local rel="$1" src="$2" id ver tmp
    [[ -e "$src" ]] || sb_die "--slurm-src $src does not exist"
    id="$(if [[ -f "$src" ]]; then sha256sum "$src"; else readlink -f "$src" | sha256sum; fi | cut -c1-12)"
    sb_src_build "$rel" "$src" "$(sb_cache_dir)/builds/site-$rel-$id" configure
}

# Debian mirror of this machine's own apt sources (no mirror host hard-coded here).
sb_debian_mirror() {
    local m
    # Only active entries (deb822 "URIs:" and one-line "deb" lines), never comments.
    m="$(grep -rhE '^[[:space:]]*(URIs:|deb[[:space:]])' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
        | grep -oE 'https?://[^[:space:]]+/debian/?([[:space:]]|$)' | head -n1 | tr -d '[:space:]')" || true
    printf '%s\n' "${m%/}"
}

# Headers slurm-ffi's build.rs reads (first existing of each group); a tree that lacks
# one is not a Slurm source tree of a supported release.
SB_FFI_HEADERS=(
    "slurm/slurm.h" "slurm/slurm_errno.h" "src/common/log.h" "src/common/list.h"
    "src/common/xmalloc.h" "src/common/xstring.h" "src/common/slurm_protocol_defs.h"
    "src/interfaces/gres.h|src/common/gres.h" "src/common/assoc_mgr.h"
    "src/interfaces/priority.h|src/common/slurm_priority.h" "src/slurmctld/slurmctld.h"
    "src/slurmctld/locks.h" "src/slurmctld/job_scheduler.h"
    "src/interfaces/preempt.h|src/slurmctld/preempt.h"
    "src/interfaces/job_submit.h|src/slurmctld/job_submit.h"
)

# Checks that $1 is a Slurm source tree of release $2 (META) with the headers ffi
# expects; dies with what is wrong.
sb_src_layout_check() {
    local dir="$1" rel="$2" group alt ok major minor
    [[ -f "$dir/META" ]] || sb_die "$dir has no META file: not a Slurm source tree"
    major="$(awk '$1 == "Major:" {print $2}' "$dir/META")"
    minor="$(awk '$1 == "Minor:" {print $2}' "$dir/META")"
    [[ "$major.$(printf '%02d' "$((10#${minor:-0}))")" == "$rel" ]] \
        || sb_die "$dir is Slurm $major.$minor (META), not $rel"
    for group in "${SB_FFI_HEADERS[@]}"; do
        ok=0
        IFS='|' read -r -a alts <<<"$group"
        for alt in "${alts[@]}"; do [[ -f "$dir/$alt" ]] && ok=1; done
        ((ok)) || sb_die "$dir lacks $group: the ffi crate cannot build against this tree"
    done
}

# Where release $1's slurm_version.h comes from: the installed headers of that release
# (host for 22.05, the root's libslurm-dev otherwise), so plugin_version matches the
# daemons exactly even when the source tree is a different micro release.
sb_release_version_header() {
    if sb_release_in_root "$1"; then
        printf '%s/usr/include/slurm/slurm_version.h\n' "$(sb_root_dir "$1")"
    else
        printf '%s\n' /usr/include/slurm/slurm_version.h
    fi
}

# Prepares (once, cached) a bindgen-ready source tree for release $1 and prints its
# path. $2: an admin's own tree to use instead of the pinned source (copied, never
# modified). Needs rootfs.sh (the version header of a root release).
sb_release_src_prepare() {
    local rel="$1" custom="${2:-}" cache base dest file sum top hdr
    cache="$(sb_cache_dir)/src"
    hdr="$(sb_release_version_header "$rel")"
    [[ -f "$hdr" ]] || sb_die "$hdr missing (the release's libslurm-dev headers)"
    if [[ -n "$custom" ]]; then
        [[ -d "$custom" ]] || sb_die "--slurm-src $custom is not a folder"
        sb_src_layout_check "$custom" "$rel"
        dest="$cache/$rel-custom/$(printf '%s' "$(readlink -f "$custom")" | sha256sum | cut -c1-12)"
        if [[ ! -e "$dest/.slurm-budget-ready" ]]; then
            rm -rf "$dest"; mkdir -p "$dest"
            cp -a "$custom/." "$dest/"
        fi
    else
        file="${SB_REL_SRC_FILE[$rel]:-}"
        [[ -n "$file" ]] || sb_die "no pinned source for $rel"
        base="$cache/$rel"
        if [[ -f "$base/.slurm-budget-ready" ]]; then
            cat "$base/.slurm-budget-ready"; return 0
        fi
        mkdir -p "$cache/dl"
        if [[ ! -f "$cache/dl/$file" ]]; then
            sb_log "downloading $file"
            curl -sSfL -o "$cache/dl/$file.part" "$(sb_debian_mirror)/${SB_REL_SRC_URL[$rel]}" \
                || sb_die "download of ${SB_REL_SRC_URL[$rel]} failed"
            mv "$cache/dl/$file.part" "$cache/dl/$file"
        fi
        sum="$(sha256sum "$cache/dl/$file" | cut -d' ' -f1)"
        [[ "$sum" == "${SB_REL_SRC_SHA256[$rel]}" ]] \
            || { rm -f "$cache/dl/$file"; sb_die "$file: sha256 $sum, pinned ${SB_REL_SRC_SHA256[$rel]}: refusing it"; }
        rm -rf "$base"; mkdir -p "$base"
        tar -xf "$cache/dl/$file" -C "$base"
        top="$(find "$base" -mindepth 1 -maxdepth 1 -type d | head -n1)"
        dest="$top"
        sb_src_layout_check "$dest" "$rel"
    fi
    # bindgen needs an (empty) config.h and the installed release's slurm_version.h;
    # no ./configure (SLURM-NOTES "Running Slurm without hardware").
    : > "$dest/config.h"
    cp "$hdr" "$dest/slurm/slurm_version.h"
    if [[ -z "$custom" ]]; then
        printf '%s\n' "$dest" > "$base/.slurm-budget-ready"
    else
        touch "$dest/.slurm-budget-ready"
    fi
    printf '%s\n' "$dest"
}

# The layout check's anchors: "stock plugin|function|struct.field|pattern". Each pattern
# is an extended regex for the first instruction of that function, in the installed
# release's own stock plugin, that reads (or writes) the field; its memory operand's
# displacement (the hex number right before "(%") is the field's offset in that release.
# Each anchor is a C function whose first access to the field is obvious in its source:
#   preempt_p_preemptable (src/plugins/preempt/partition_prio): a job's part_ptr, the
#     16-bit compare of the two partitions' priority_tier, the test of preempt_mode
#     against PREEMPT_MODE_OFF (0);
#   priority_p_set (src/plugins/priority/basic): job->direct_set_prio, job->priority,
#     job->details, details->nice;
#   preempt_p_preemptable (src/plugins/preempt/qos): preemptee->qos_ptr;
#   mcs_p_set_mcs_label (src/plugins/mcs/account): job->account (xstrcmp's second
#     argument), the store to job->mcs_label, details->whole_node.
# Together they sample job_record_t from its start (account) to past the middle
# (qos_ptr), plus job_details_t and part_record_t, across four plugins.
SB_LAYOUT_ANCHORS=(
    'preempt_partition_prio.so|preempt_p_preemptable|job_record.part_ptr|mov +0x[0-9a-f]+\(%r[sd]i\),%r[a-z0-9]+$'
    'preempt_partition_prio.so|preempt_p_preemptable|part_record.priority_tier|cmp +%([a-d]x|[sd]i|r[0-9]+w),0x[0-9a-f]+\(%r[a-z0-9]+\)$'
    'preempt_partition_prio.so|preempt_p_preemptable|part_record.preempt_mode|cmpw +\$0x0,0x[0-9a-f]+\(%r[a-z0-9]+\)'
    'priority_basic.so|priority_p_set|job_record.direct_set_prio|cmpw +\$0x0,0x[0-9a-f]+\(%rsi\)'
    'priority_basic.so|priority_p_set|job_record.priority|mov +0x[0-9a-f]+\(%rsi\),%e[a-z0-9]+$'
    'priority_basic.so|priority_p_set|job_record.details|mov +0x[0-9a-f]+\(%rsi\),%r[a-z0-9]+$'
    'priority_basic.so|priority_p_set|job_details_t.nice|mov +0x[0-9a-f]+\(%r([a-d]x|[89]|1[01])\),%e[a-z0-9]+$'
    'preempt_qos.so|preempt_p_preemptable|job_record.qos_ptr|mov +0x[0-9a-f]+\(%rdi\),%r[a-z0-9]+$'
    'mcs_account.so|mcs_p_set_mcs_label|job_record.account|mov +0x[0-9a-f]+\(%r[a-z0-9]+\),%rsi$'
    'mcs_account.so|mcs_p_set_mcs_label|job_record.mcs_label|mov +%r[a-z0-9]+,0x[0-9a-f]+\(%r[a-z0-9]+\)$'
    'mcs_account.so|mcs_p_set_mcs_label|job_details_t.whole_node|testb +\$0x[0-9a-f]+,0x[0-9a-f]+\(%r[a-z0-9]+\)'
)

# Prints the offset (decimal) an anchor reads in the stock plugin $1 (path), function
# $2, pattern $3; nothing when the function or the instruction is not found.
sb_layout_offset_in_binary() {
    local hex
    hex="$(objdump -d --no-show-raw-insn "$1" 2>/dev/null \
        | awk -v fn="$2" '$0 ~ ("<" fn "(@@Base)?>:$") {on = 1; next} on && /^$/ {exit} on' \
        | grep -m1 -oE "$3" | grep -oE '0x[0-9a-f]+\(' | tr -d '(' || true)"
    [[ -n "$hex" ]] && printf '%d\n' "$hex"
}

# Prints the offset bindgen computed for struct.field $2 (e.g. job_record.part_ptr) in
# bindings.rs $1; nothing when the field is not in the bindings.
sb_layout_offset_in_bindings() {
    local st="${2%%.*}" field="${2#*.}"
    grep -m1 -oE "offset_of!\(${st}, ${field}\) - [0-9]+" "$1" | awk '{print $NF}' || true
}

# Checks the bindings of a build against the installed release's own binaries: for every
# anchor above, the offset bindgen computed from the source tree must equal the one the
# release's own stock plugin uses (objdump). A source tree of another micro release can
# shift these structs (seen: a 26.05 branch-head tree vs Debian's 26.05.5 binaries:
# job_record_t +8 from burst_buffer on, 7 of 13 comparisons), and a
# plugin reading the wrong offsets loads fine but reads garbage. Also compares the
# public headers slurm.h and slurm_errno.h of the tree with the installed release's
# (comments ignored). $1 release, $2 the cargo target folder. Prints one line per
# comparison and a summary; returns 1 on any mismatch, 2 when nothing could be compared.
sb_layout_check() {
    local rel="$1" target="$2" root="" bindings anchor so fn field pat ours theirs
    local same=0 differ=0 unknown=0 h src_dir inst plugdir incdir
    plugdir="$SB_SYSTEM_PLUGIN_DIR"
    incdir=/usr/include/slurm
    if sb_release_in_root "$rel"; then
        root="$(sb_root_dir "$rel")"
        plugdir="$root$plugdir"
        incdir="$root$incdir"
    elif sb_release_from_source "$rel"; then
        # The prefix's own stock plugins: same tree, same compiler as the daemons.
        plugdir="$(sb_release_prefix "$rel")/lib/slurm"
        incdir="$(sb_release_prefix "$rel")/include/slurm"
    fi
    bindings="$(ls -t "$target"/release/build/slurm-ffi-*/out/bindings.rs 2>/dev/null | head -n1)"
    [[ -n "$bindings" ]] || { echo "layout check: cannot tell (no bindings.rs under $target)"; return 2; }
    command -v objdump >/dev/null || { echo "layout check: cannot tell (no objdump)"; return 2; }
    for anchor in "${SB_LAYOUT_ANCHORS[@]}"; do
        IFS='|' read -r so fn field pat <<<"$anchor"
        ours="$(sb_layout_offset_in_bindings "$bindings" "$field")"
        theirs=""
        [[ -f "$plugdir/$so" ]] \
            && theirs="$(sb_layout_offset_in_binary "$plugdir/$so" "$fn" "$pat")"
        if [[ -z "$ours" || -z "$theirs" ]]; then
            echo "  $field: cannot tell (bindings: ${ours:-?}, $so $fn: ${theirs:-?})"
            unknown=$((unknown + 1))
        elif [[ "$ours" == "$theirs" ]]; then
            echo "  $field: $ours (bindings) = $theirs ($so $fn)"
            same=$((same + 1))
        else
            echo "  $field: $ours (bindings) != $theirs ($so $fn)"
            differ=$((differ + 1))
        fi
    done
    # Public headers: the source tree's (its slurm_version.h is already the installed
    # one's) against the release's libslurm-dev, comments stripped by the preprocessor.
    src_dir="$(grep -m1 -oE '^cargo::metadata=src_dir=.*' "$(dirname "$bindings")/../output" 2>/dev/null | cut -d= -f3- || true)"
    for h in slurm.h slurm_errno.h; do
        inst="$incdir/$h"
        if [[ -z "$src_dir" || ! -f "$src_dir/slurm/$h" || ! -f "$inst" ]] || ! command -v cpp >/dev/null; then
            echo "  slurm/$h: cannot tell (no source tree or installed header)"
            unknown=$((unknown + 1))
        elif cmp -s <(cpp -fpreprocessed -P "$src_dir/slurm/$h" 2>/dev/null) <(cpp -fpreprocessed -P "$inst" 2>/dev/null); then
            echo "  slurm/$h: same as the installed $inst"
            same=$((same + 1))
        else
            echo "  slurm/$h: differs from the installed $inst"
            differ=$((differ + 1))
        fi
    done
    if ((differ)); then
        echo "layout check: $differ of $((same + differ)) comparisons differ from the installed Slurm $rel ($unknown not readable): the source tree is not the installed release's"
        return 1
    fi
    if ((same == 0)); then
        echo "layout check: cannot tell ($unknown comparisons not readable)"
        return 2
    fi
    echo "layout check: all $same comparisons match the installed Slurm $rel ($unknown not readable)"
    return 0
}
