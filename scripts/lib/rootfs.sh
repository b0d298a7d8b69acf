# shellcheck shell=bash
# Root filesystems for the Slurm releases that do not run from this machine's packages.
# Owns: building (debootstrap, then the pinned slurm packages), caching and checking
# the root of a release under $(sb_cache_dir)/roots/<release>. Needs common.sh and
# releases.sh sourced first. Recipe and pitfalls: ../shared/SLURM-NOTES.md "Current
# releases beside Debian 12".

sb_root_dir() { printf '%s/roots/%s\n' "$(sb_cache_dir)" "$1"; }

# Prints the installed slurm-wlm package version of a root (empty if none).
sb_root_deb_version() {
    local root="$1"
    chroot "$root" dpkg-query -W -f='${Version}' slurmctld 2>/dev/null || true
}

# Makes sure the root of release $1 exists, holds exactly the pinned packages, and is
# ready to run daemons in. Idempotent: a complete root (marker file) is only checked.
sb_root_ensure() {
    local rel="$1" root suite deb mirror tmp marker have
    sb_release_in_root "$rel" || return 0
    root="$(sb_root_dir "$rel")"
    suite="${SB_REL_SUITE[$rel]}"
    deb="${SB_REL_DEB[$rel]}"
    marker="$root/.slurm-budget-root"
    if [[ -f "$marker" ]]; then
        have="$(sb_root_deb_version "$root")"
        [[ "$have" == "$deb" ]] || sb_die "root $root has slurm $have, the pin says $deb: delete it (rm -rf $root) and run again"
        return 0
    fi
    [[ $(id -u) -eq 0 ]] || sb_die "building the $rel root needs root (debootstrap, chroot)"
    command -v debootstrap >/dev/null || sb_die "debootstrap missing: apt-get install debootstrap (scripts/setup does)"
    mirror="$(sb_debian_mirror)"
    [[ -n "$mirror" ]] || sb_die "no Debian mirror found in /etc/apt sources"
    tmp="$root.tmp"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    sb_log "building the Slurm $rel root: debootstrap $suite from $mirror into $root (~30 s)"
    # Debian unstable's Release file reads as expired on some mirrors: accepted here
    # only for the bootstrap and in the root's own apt (pitfall in SLURM-NOTES).
    debootstrap --variant=minbase "$suite" "$tmp" "$mirror" >"$tmp.log" 2>&1 \
        || sb_die "debootstrap $suite failed, see $tmp.log"
    printf 'Acquire::Check-Valid-Until "false";\n' > "$tmp/etc/apt/apt.conf.d/99slurm-budget"
    printf '#!/bin/sh\nexit 101\n' > "$tmp/usr/sbin/policy-rc.d"
    chmod 0755 "$tmp/usr/sbin/policy-rc.d"
    sb_root_write_hosts "$tmp"
    local pkgs=() p
    for p in slurmctld slurmd slurm-client libslurm-dev; do pkgs+=("$p=$deb"); done
    sb_log "installing ${pkgs[*]} in the root"
    if ! chroot "$tmp" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"' \
        sh "${pkgs[@]}" >>"$tmp.log" 2>&1; then
        sb_die "installing slurm $deb in the $suite root failed (see $tmp.log). If Debian $suite no longer carries $deb, the archive moved on: update SB_REL_DEB/SB_REL_VERNUM (and the source pin) in scripts/lib/releases.sh"
    fi
    have="$(sb_root_deb_version "$tmp")"
    [[ "$have" == "$deb" ]] || sb_die "root has slurm $have, expected $deb"
    chroot "$tmp" apt-get clean >/dev/null 2>&1 || true
    # The exact package set, for the record (README: what each release was tested on).
    chroot "$tmp" dpkg-query -W -f='${Package} ${Version}\n' > "$tmp/.slurm-budget-packages"
    printf 'release=%s suite=%s slurm=%s built=%s\n' "$rel" "$suite" "$deb" "$(date -u +%FT%TZ)" > "$tmp/.slurm-budget-root"
    rm -rf "$root"
    mv "$tmp" "$root"
    mv "$tmp.log" "$root.log"
    sb_log "root ready: $root (slurm $deb)"
}

# /etc/hosts of the root: debootstrap writes none; slurmd resolves this host's name.
sb_root_write_hosts() {
    local host
    host="$(hostname -s)"
    printf '127.0.0.1 localhost %s %s\n::1 localhost ip6-localhost\n' "$host" "$(hostname)" > "$1/etc/hosts"
}
