# shellcheck shell=bash
# The Slurm releases slurm-budget builds and tests for, and their pins.
# Owns: which releases exist (22.05 = this Debian 12 machine's own packages; 24.11 and
# 26.05 = Debian 13 "trixie" and Debian unstable "sid" packages in a debootstrap root),
# the exact Debian package version each root is built from, the Slurm version number a
# plugin must carry for it, and where its source comes from (sha256-pinned).
# Sourced by scripts/lib/rootfs.sh, scripts/setup, scripts/testbed, scripts/test.

# Releases in test order; the first is the default of TESTBED_SLURM and scripts/setup.
SB_RELEASES=(22.05 24.11 26.05)
SB_DEFAULT_RELEASE=22.05

# Debian suite the root of a release is made from (22.05: the host itself).
declare -A SB_REL_SUITE=([24.11]=trixie [26.05]=sid)
# Exact slurm-wlm package version installed in the root. Debian unstable moves daily:
# when the archive no longer has this version, building a NEW root fails with a clear
# message (a cached root keeps working); bump the pin and the source pin together.
declare -A SB_REL_DEB=([24.11]=24.11.5-4+deb13u1 [26.05]=26.05.5-1)
# SLURM_VERSION_NUMBER of that package: plugin_version must equal it exactly.
declare -A SB_REL_VERNUM=([24.11]=0x180b05 [26.05]=0x1a0505)
# Source: 24.11 = Debian's copy of the upstream tarball (the mirror 404s the .dsc and
# Debian's patches, so none are applied; Debian 13 ships none that touch the plugin
# interfaces' structs); 26.05 = the slurm-26.05 branch tree kept in ../shared/slurm-src
# (the mirror has none of sid's source; see its SOURCES.md).
declare -A SB_REL_SRC_URL=(
    [24.11]=pool/main/s/slurm-wlm/slurm-wlm_24.11.5.orig.tar.gz
)
declare -A SB_REL_SRC_FILE=(
    [24.11]=slurm-wlm_24.11.5.orig.tar.gz
    [26.05]=slurm-26.05-531c4b2.tar.xz
)
declare -A SB_REL_SRC_SHA256=(
    [24.11]=e1a5547edd212c38b5e3230a284133f777b32746551f094aaa81cc4af375e332
    [26.05]=6557de8ec078a31cf90b8dfbeab8ed7885e7b792c71ee7dd177c295fd4416aeb
)

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

# 0 if release $1 runs from a debootstrap root (not the host's own packages).
sb_release_in_root() { [[ -n "${SB_REL_SUITE[$1]:-}" ]]; }

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
        if [[ "$rel" == 26.05 ]]; then
            cp "$SB_ROOT/../shared/slurm-src/$file" "$cache/dl/$file" 2>/dev/null \
                || [[ -f "$cache/dl/$file" ]] \
                || sb_die "$file not found in ../shared/slurm-src: pass --slurm-src DIR (a Slurm 26.05 tree)"
        elif [[ ! -f "$cache/dl/$file" ]]; then
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

# Checks the bindings of a build against the installed release's own binary: the
# offset of job_record_t's part_ptr that the stock preempt/partition_prio plugin of
# that release loads first in preempt_p_preemptable (`preemptor->part_ptr` /
# `preemptee->part_ptr`) must equal the one bindgen computed from the source tree.
# A source tree of another micro release can shift job_record_t (seen: the 26.05 tree
# in ../shared/slurm-src vs Debian's 26.05.5: 776 vs 784), and a plugin reading the
# wrong offsets loads fine but reads garbage. $1 release, $2 the cargo target folder.
# Prints what it compared; returns 1 on a mismatch, 2 when it cannot tell.
sb_layout_check() {
    local rel="$1" target="$2" root="" so bindings ours theirs
    sb_release_in_root "$rel" && root="$(sb_root_dir "$rel")"
    so="$root$SB_SYSTEM_PLUGIN_DIR/preempt_partition_prio.so"
    bindings="$(ls -t "$target"/release/build/slurm-ffi-*/out/bindings.rs 2>/dev/null | head -n1)"
    [[ -f "$so" && -n "$bindings" ]] || { echo "layout check: cannot tell (no $so or bindings)"; return 2; }
    command -v objdump >/dev/null || { echo "layout check: cannot tell (no objdump)"; return 2; }
    ours="$(grep -oE 'offset_of!\(job_record, part_ptr\) - [0-9]+' "$bindings" | head -n1 | awk '{print $NF}')"
    theirs="$(objdump -d --no-show-raw-insn "$so" | awk '/<preempt_p_preemptable(@@Base)?>:/,/^$/' \
        | grep -oE 'mov +0x[0-9a-f]+\(%r[sd]i\),%r[a-z0-9]+$' | head -n1 | grep -oE '0x[0-9a-f]+' || true)"
    [[ -n "$ours" && -n "$theirs" ]] || { echo "layout check: cannot tell (offsets not found)"; return 2; }
    theirs=$((theirs))
    if [[ "$ours" == "$theirs" ]]; then
        echo "layout check: job_record_t.part_ptr at $ours in the bindings and in Slurm $rel's own preempt_partition_prio.so"
        return 0
    fi
    echo "layout check: job_record_t.part_ptr at $ours in the bindings but at $theirs in the installed Slurm $rel ($so): the source tree is not the installed release's"
    return 1
}
