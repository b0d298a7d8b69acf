# shellcheck shell=bash
# Root filesystems for the Slurm releases that do not run from this machine's packages.
# Owns: building (debootstrap, then the pinned slurm packages, slurmdbd and MariaDB for
# the testbed's accounting), caching, checking and extending the root of a release under
# $(sb_cache_dir)/roots/<release>. Needs common.sh and
# releases.sh sourced first. Recipe and pitfalls: ../shared/SLURM-NOTES.md "Current
# releases beside Debian 12".

sb_root_dir() { printf '%s/roots/%s\n' "$(sb_cache_dir)" "$1"; }

# Prints the installed version of package $2 (default slurmctld) in root $1 (empty if
# not installed).
sb_root_deb_version() {
    local root="$1" pkg="${2:-slurmctld}"
    chroot "$root" dpkg-query -W -f='${db:Status-Abbrev} ${Version}' "$pkg" 2>/dev/null \
        | awk '$1 == "ii" {print $2}' || true
}

# The packages of a root: Slurm's daemons, clients and headers pinned to the release's
# exact version (slurmdbd included), and the suite's MariaDB (TESTBED_ACCOUNTING=1 runs
# the root's own mariadbd, slurmdbd and sacctmgr). $1 release.
sb_root_packages() {
    local deb="${SB_REL_DEB[$1]}" p
    for p in slurmctld slurmd slurm-client libslurm-dev slurmdbd; do printf '%s=%s\n' "$p" "$deb"; done
    printf '%s\n' mariadb-server mariadb-client
}

# Prints what a root $1 of release $2 lacks of sb_root_packages (a package missing or
# at another version than pinned), one "name=version (have: ...)" per line; nothing
# when complete.
sb_root_missing() {
    local root="$1" rel="$2" spec name want have
    while IFS= read -r spec; do
        name="${spec%%=*}"
        want=""
        [[ "$spec" == *=* ]] && want="${spec#*=}"
        have="$(sb_root_deb_version "$root" "$name")"
        if [[ -z "$have" || ( -n "$want" && "$have" != "$want" ) ]]; then
            printf '%s (have: %s)\n' "$spec" "${have:-none}"
        fi
    done < <(sb_root_packages "$rel")
}

# apt-get install of packages $2... into root $1, output appended to log $LOG (a file).
sb_root_apt_install() {
    local root="$1"; shift
    chroot "$root" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"' \
        sh "$@"
}

# Makes sure the root of release $1 exists, holds exactly the pinned packages
# (sb_root_packages), and is ready to run daemons in. Idempotent: a complete root (marker
# file) is only checked; a cached root that lacks packages added since it was built
# (slurmdbd and MariaDB) is extended in place, saying so; one with another Slurm version
# is refused. One builder at a time (a lock beside the root).
sb_root_ensure() {
    local rel="$1" root suite deb mirror tmp marker have missing lock t0
    sb_release_in_root "$rel" || return 0
    root="$(sb_root_dir "$rel")"
    suite="${SB_REL_SUITE[$rel]}"
    deb="${SB_REL_DEB[$rel]}"
    marker="$root/.slurm-budget-root"
    mkdir -p "$(dirname "$root")"
    exec {lock}>"$root.lock"
    flock "$lock"
    if [[ -f "$marker" ]]; then
        have="$(sb_root_deb_version "$root")"
        [[ "$have" == "$deb" ]] || sb_die "root $root has slurm $have, the pin says $deb: delete it (rm -rf $root) and run again"
        missing="$(sb_root_missing "$root" "$rel")"
        if [[ -n "$missing" ]]; then
            [[ $(id -u) -eq 0 ]] || sb_die "root $root lacks $(tr '\n' ' ' <<<"$missing")and extending it needs root"
            sb_log "root $root (built before these were part of it) lacks: $(tr '\n' ' ' <<<"$missing")- installing them into it (~1 min; log $root.log)"
            t0=$(date +%s)
            local pkgs=()
            mapfile -t pkgs < <(sb_root_packages "$rel")
            sb_root_apt_install "$root" "${pkgs[@]}" >>"$root.log" 2>&1 \
                || sb_die "extending the $rel root failed (see $root.log); or delete it (rm -rf $root) and run again to build it anew"
            chroot "$root" apt-get clean >/dev/null 2>&1 || true
            missing="$(sb_root_missing "$root" "$rel")"
            [[ -z "$missing" ]] || sb_die "root $root still lacks: $(tr '\n' ' ' <<<"$missing")(see $root.log)"
            chroot "$root" dpkg-query -W -f='${Package} ${Version}\n' > "$root/.slurm-budget-packages"
            printf 'extended=%s\n' "$(date -u +%FT%TZ)" >> "$marker"
            sb_log "root extended in $(( $(date +%s) - t0 )) s: $root"
        fi
        exec {lock}>&-
        return 0
    fi
    [[ $(id -u) -eq 0 ]] || sb_die "building the $rel root needs root (debootstrap, chroot)"
    command -v debootstrap >/dev/null || sb_die "debootstrap missing: apt-get install debootstrap (scripts/setup does)"
    mirror="$(sb_debian_mirror)"
    [[ -n "$mirror" ]] || sb_die "no Debian mirror found in /etc/apt sources"
    tmp="$root.tmp"
    # A failed debootstrap leaves proc mounted in its target: unmount before deleting
    # (rm -rf would otherwise walk into the host's /proc).
    sb_root_umount_under "$tmp"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    t0=$(date +%s)
    sb_log "building the Slurm $rel root: debootstrap $suite from $mirror into $root (~30 s)"
    # Debian unstable's Release file reads as expired on some mirrors: accepted here
    # only for the bootstrap and in the root's own apt (pitfall in SLURM-NOTES).
    debootstrap --variant=minbase "$suite" "$tmp" "$mirror" >"$tmp.log" 2>&1 \
        || sb_die "debootstrap $suite failed, see $tmp.log"
    printf 'Acquire::Check-Valid-Until "false";\n' > "$tmp/etc/apt/apt.conf.d/99slurm-budget"
    printf '#!/bin/sh\nexit 101\n' > "$tmp/usr/sbin/policy-rc.d"
    chmod 0755 "$tmp/usr/sbin/policy-rc.d"
    sb_root_write_hosts "$tmp"
    local pkgs=()
    mapfile -t pkgs < <(sb_root_packages "$rel")
    sb_log "installing ${pkgs[*]} in the root"
    if ! sb_root_apt_install "$tmp" "${pkgs[@]}" >>"$tmp.log" 2>&1; then
        sb_die "installing slurm $deb in the $suite root failed (see $tmp.log). If Debian $suite no longer carries $deb, the archive moved on: update SB_REL_DEB/SB_REL_VERNUM (and the source pin) in scripts/lib/releases.sh"
    fi
    have="$(sb_root_deb_version "$tmp")"
    [[ "$have" == "$deb" ]] || sb_die "root has slurm $have, expected $deb"
    missing="$(sb_root_missing "$tmp" "$rel")"
    [[ -z "$missing" ]] || sb_die "root lacks: $(tr '\n' ' ' <<<"$missing")(see $tmp.log)"
    chroot "$tmp" apt-get clean >/dev/null 2>&1 || true
    # The exact package set, for the record (README: what each release was tested on).
    chroot "$tmp" dpkg-query -W -f='${Package} ${Version}\n' > "$tmp/.slurm-budget-packages"
    printf 'release=%s suite=%s slurm=%s built=%s\n' "$rel" "$suite" "$deb" "$(date -u +%FT%TZ)" > "$tmp/.slurm-budget-root"
    rm -rf "$root"
    mv "$tmp" "$root"
    mv "$tmp.log" "$root.log"
    exec {lock}>&-
    sb_log "root ready in $(( $(date +%s) - t0 )) s: $root (slurm $deb, slurmdbd, MariaDB)"
}

# Unmounts every mount at or below folder $1 (deepest first).
sb_root_umount_under() {
    local m
    [[ -d "$1" ]] || return 0
    while IFS= read -r m; do
        umount -l "$m" 2>/dev/null || sb_die "cannot unmount $m (left by a failed build?): unmount it and run again"
    done < <(awk -v d="$(readlink -f "$1")" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -r)
}

# /etc/hosts of the root: debootstrap writes none; slurmd resolves this host's name.
sb_root_write_hosts() {
    local host
    host="$(hostname -s)"
    printf '127.0.0.1 localhost %s %s\n::1 localhost ip6-localhost\n' "$host" "$(hostname)" > "$1/etc/hosts"
}
