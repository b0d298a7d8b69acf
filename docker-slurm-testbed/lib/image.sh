# shellcheck shell=bash
# docker-slurm-testbed/lib/image.sh — local base images for containers, made without a
# registry: a Debian root made with debootstrap, then `docker import`.
#
# Source after scripts/lib/common.sh (uses sb_log, sb_die, sb_cache_dir). Run as root.
#
#   sb_docker_rootfs NAME SUITE [PKG]...
#       Make (first call) or reuse (later calls: a stamp records suite and packages) the
#       root $(sb_docker_rootfs_dir NAME): `debootstrap --variant=minbase SUITE` with
#       PKG... included. Same shape as sb_rootfs_ensure of scripts/lib/rootfs.sh (branch
#       `releases`); when that lands this function becomes a call to it.
#   sb_docker_base_image IMAGE NAME SUITE [PKG]...
#       The image IMAGE (systemd as its command, ready to boot as PID 1) from that root;
#       rebuilt only when the root changed (label sb.rootfs holds the stamp).
#
# Why debootstrap and not a Dockerfile FROM debian: no image can be pulled here.
# Why systemd in the image: the package tests boot it as PID 1 to run the units the
# packages ship; plain commands (the testbed) run in the same image without it.

sb_docker_cache() { printf '%s\n' "${SB_DOCKER_CACHE:-$(sb_cache_dir)/docker}"; }
sb_docker_rootfs_dir() { printf '%s/rootfs/%s\n' "$(sb_docker_cache)" "$1"; }

# The first Debian archive of this machine's apt sources (no mirror hard-coded).
sb_docker_mirror() {
    if [[ -n "${SB_DEBIAN_MIRROR:-}" ]]; then
        printf '%s\n' "$SB_DEBIAN_MIRROR"
        return
    fi
    local uri
    uri="$({ awk '/^URIs:/ { for (i = 2; i <= NF; i++) print $i }' /etc/apt/sources.list.d/*.sources 2>/dev/null
             awk '$1 == "deb" { print $2 }' /etc/apt/sources.list 2>/dev/null; } | grep -E '/debian/?$' | head -n1)"
    [[ -n "$uri" ]] || sb_die "no Debian archive in the apt sources; set SB_DEBIAN_MIRROR"
    printf '%s\n' "${uri%/}"
}

sb_docker_rootfs() { # NAME SUITE PKG...
    local name="$1" suite="$2"; shift 2
    local root want lock mirror t0
    root="$(sb_docker_rootfs_dir "$name")"
    want="suite=$suite packages=$*"
    [[ -f "$root/.sb-rootfs" && "$(cat "$root/.sb-rootfs")" == "$want" ]] && return 0
    mkdir -p "$(dirname "$root")"
    lock="$(dirname "$root")/.$name.lock"
    exec {_sb_docker_lock}>"$lock"
    flock "$_sb_docker_lock"
    if [[ ! -f "$root/.sb-rootfs" || "$(cat "$root/.sb-rootfs")" != "$want" ]]; then
        command -v debootstrap >/dev/null \
            || DEBIAN_FRONTEND=noninteractive flock /tmp/apt.lock sh -c \
                'apt-get update -qq && apt-get install -y -qq --no-install-recommends debootstrap' >/dev/null \
            || sb_die "cannot install debootstrap"
        mirror="$(sb_docker_mirror)"
        t0=$(date +%s)
        sb_log "rootfs $name: debootstrap $suite + ${*:-nothing} from $mirror (once; a few minutes)"
        rm -rf "$root"
        local include=()
        (($#)) && include=(--include="$(IFS=,; printf '%s' "$*")")
        debootstrap --variant=minbase "${include[@]}" "$suite" "$root" "$mirror" \
            >"$(dirname "$root")/$name.debootstrap.log" 2>&1 \
            || sb_die "debootstrap failed: see $(dirname "$root")/$name.debootstrap.log"
        # Nothing the image does not need: downloaded .debs and apt lists.
        rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
        printf '%s\n' "$want" >"$root/.sb-rootfs"
        sb_log "rootfs $name ready in $(($(date +%s) - t0)) s"
    fi
    exec {_sb_docker_lock}>&-
}

sb_docker_base_image() { # IMAGE NAME SUITE PKG...
    local image="$1" name="$2"; shift 2
    sb_docker_rootfs "$name" "$@"
    local root stamp have
    root="$(sb_docker_rootfs_dir "$name")"
    # SB_SYSTEMD_ARGS: arguments for systemd as PID 1 (in a container systemd reads its
    # own command line where it would read the kernel's), part of the image's identity.
    stamp="$(cat "$root/.sb-rootfs") $(stat -c %Y "$root/.sb-rootfs")${SB_SYSTEMD_ARGS:+ $SB_SYSTEMD_ARGS}"
    have="$(docker image inspect -f '{{ index .Config.Labels "sb.rootfs" }}' "$image" 2>/dev/null || true)"
    [[ "$have" == "$stamp" ]] && return 0
    sb_log "docker import $root as $image"
    tar -C "$root" --exclude=./.sb-rootfs -c . | docker import - "$image-rootfs" >/dev/null \
        || sb_die "docker import of $root failed"
    # `docker import --change` takes no STOPSIGNAL: a one-line build on the imported image
    # (local, nothing pulled) adds what systemd as PID 1 needs. container=docker tells
    # systemd where it runs; SIGRTMIN+3 is its clean shutdown.
    local cmd='"/lib/systemd/systemd"' arg
    for arg in ${SB_SYSTEMD_ARGS:-}; do cmd+=", \"$arg\""; done
    printf 'FROM %s\nLABEL sb.rootfs="%s"\nENV container=docker\nSTOPSIGNAL SIGRTMIN+3\nCMD [%s]\n' \
        "$image-rootfs" "$stamp" "$cmd" | docker build -q -t "$image" - >/dev/null 2>"$(sb_docker_cache)/$name.build.log" \
        || sb_die "docker build of $image failed: $(tail -n 5 "$(sb_docker_cache)/$name.build.log")"
    docker rmi "$image-rootfs" >/dev/null 2>&1 || true
}
