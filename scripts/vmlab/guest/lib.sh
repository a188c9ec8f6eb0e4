# guest/lib.sh: shell helpers for vmlab guest tests (POSIX sh; sourced, never executed).
#
#   . "$VMLAB_LIB"
#
# Steps and failures
#   step NAME CMD...           run CMD; on failure print "FAIL step NAME: ..." and exit 1
#   fail MSG                   print "FAIL MSG" and exit 1
#   need_module MOD...         modprobe each; fail (never skip) when one is missing
# Soft-RoCE
#   rxe_up [ADDR] [MTU]        dummy netdev rxe-net0 with ADDR (default $VMLAB_ADDR) and an
#                              rxe0 link on it; idempotent
# LIO (configfs)
#   lio_target IQN LUN...      a target with one TPG, portal $VMLAB_ADDR:$LIO_PORT, LUNs in
#                              order lun_0, lun_1, ...; LUN is TYPE:MiB[:BLOCKSIZE] with TYPE
#                              rd (ramdisk) or file (fileio, backing file under
#                              $LIO_FILE_DIR); e.g. lio_target $VMLAB_IQN rd:256 file:64:4096
#                              Env: LIO_ISER=1|0 (default 1: iSER and TCP on the portal),
#                              LIO_PORT (3260), LIO_WCE=1 (write cache), LIO_TPU=1 (UNMAP), LIO_CHAP_USER/LIO_CHAP_PASS (CHAP),
#                              LIO_CHAP_MUTUAL_USER/LIO_CHAP_MUTUAL_PASS (mutual CHAP)
#   lio_iser IQN 0|1           turn iSER off/on on the target's portal
#   lio_teardown               remove every LIO target and backstore
# Kernel initiator (open-iscsi)
#   iscsi_login IQN iser|tcp [ADDR:PORT]   discovery + login; prints the disk (/dev/sdX) of
#                              LUN 0 (ISCSI_LUN for another); Env: ISCSI_CHAP_USER,
#                              ISCSI_CHAP_PASS, ISCSI_CHAP_MUTUAL_USER, ISCSI_CHAP_MUTUAL_PASS
#   iscsi_disk IQN [LUN]       the disk of a logged-in session
#   iscsi_logout_all
# tgt
#   tgt_iser IQN MiB           tgtd with iSER on port 3260 (LIO's portal must be gone), one
#                              LUN backed by a file; initiators: TGT_INITIATORS (names)
#   tgt_stop
# Other kernel features
#   nbd_load, ublk_load        load nbd / ublk_drv and wait for /dev/nbd0 / /dev/ublk-control
# Data and benchmarks
#   verify_rw DEV [MiB]        write random data with O_DIRECT, read back, compare sha256
#   fio_run DEV OUT.json RW BS QD [SECONDS]          one fio job, JSON output
#   fio_baseline DEV INITIATOR [SECONDS]            the baseline workloads -> bench rows
#   fio_json_row INITIATOR WORKLOAD FIO.json        one bench row from fio's JSON
#   bench_row INITIATOR WORKLOAD IOPS MBPS [LAT_US] [KEY=VALUE...]
#   iscsi_perf_row INITIATOR WORKLOAD URL BLOCKS QD [SECONDS]   libiscsi iscsi-perf -> row
#   bench_table [FILE]         the side-by-side table (ratios against kernel-iser)
# Runner (used by init.sh)
#   vmlab_reset, vmlab_run_dir DIR

: "${VMLAB_ADDR:=10.99.0.1}"
: "${VMLAB_IQN:=iqn.2003-01.org.linux-iscsi.vmlab:lio}"
: "${VMLAB_OUT:=/tmp/vmlab-out}"
: "${VMLAB_BENCH_JSON:=$VMLAB_OUT/bench.jsonl}"
: "${VMLAB_SRC:=/mnt/host}"
: "${LIO_PORT:=3260}"
: "${LIO_FILE_DIR:=/var/tmp/vmlab-lio}"
: "${VMLAB_FIO_SECONDS:=5}"
export VMLAB_ADDR VMLAB_IQN VMLAB_OUT VMLAB_BENCH_JSON VMLAB_SRC LIO_PORT LIO_FILE_DIR VMLAB_FIO_SECONDS

LIO=/sys/kernel/config/target

vmlab_log() { echo "vmlab: $*"; }

fail() {
	echo "FAIL $*" >&2
	exit 1
}

# step NAME CMD...: run CMD, name the step in the log either way.
step() {
	_s_name=$1
	shift
	_s_t0=$(date +%s)
	echo "--- step $_s_name: $*" >&2
	if "$@"; then
		echo "--- step $_s_name: ok ($(($(date +%s) - _s_t0)) s)" >&2
		return 0
	else
		_s_rc=$?
	fi
	echo "FAIL step $_s_name: '$*' exited $_s_rc" >&2
	exit 1
}

need_module() {
	for _m in "$@"; do
		modprobe "$_m" 2>&1 || fail "need_module: kernel module $_m missing in $(uname -r) (this test needs it)"
	done
}

# wait_for SECONDS CMD...: poll CMD every 0.2 s until it succeeds.
wait_for() {
	_w_n=$(($1 * 5))
	shift
	while ! "$@" 2>/dev/null; do
		_w_n=$((_w_n - 1))
		[ "$_w_n" -gt 0 ] || return 1
		sleep 0.2
	done
}

# ---- soft-RoCE ----

rxe_up() {
	_addr=${1:-$VMLAB_ADDR}
	_mtu=${2:-9000}
	need_module rdma_rxe ib_uverbs rdma_ucm
	if ! ip link show rxe-net0 >/dev/null 2>&1; then
		ip link add rxe-net0 type dummy || return 1
		ip link set rxe-net0 mtu "$_mtu" || return 1
		ip addr add "$_addr/24" dev rxe-net0 || return 1
		ip link set rxe-net0 up || return 1
	fi
	if ! rdma link show rxe0/1 >/dev/null 2>&1; then
		rdma link add rxe0 type rxe netdev rxe-net0 || return 1
	fi
	wait_for 10 sh -c 'ibv_devices | grep -qw rxe0' || {
		echo "rxe_up: rxe0 not in ibv_devices" >&2
		return 1
	}
	wait_for 10 sh -c 'rdma link show rxe0/1 | grep -q "state ACTIVE"' || {
		echo "rxe_up: rxe0 port not ACTIVE: $(rdma link show rxe0/1)" >&2
		return 1
	}
}

# ---- LIO ----

lio_load() {
	need_module configfs target_core_mod target_core_file iscsi_target_mod
	[ -d $LIO ] || mount -t configfs configfs /sys/kernel/config 2>/dev/null
	[ -d $LIO/iscsi ] || mkdir $LIO/iscsi || return 1
}

# _lio_put FILE VALUE: write a configfs attribute without a newline (LIO keeps a trailing
# newline in CHAP userid/password, and CHAP then fails), saying which one failed.
_lio_put() {
	printf '%s' "$2" >"$1" 2>/dev/null || {
		echo "lio: cannot write '$2' to ${1#$LIO/}" >&2
		return 1
	}
}

lio_target() {
	_iqn=$1
	shift
	[ $# -gt 0 ] || {
		echo "lio_target: no LUNs" >&2
		return 1
	}
	lio_load || return 1
	_tag=$(echo "$_iqn" | cksum | cut -d' ' -f1)
	_tpg=$LIO/iscsi/$_iqn/tpgt_1
	mkdir -p "$_tpg" || return 1
	_i=0
	for _spec in "$@"; do
		_type=${_spec%%:*}
		_rest=${_spec#*:}
		_mib=${_rest%%:*}
		_bs=512
		case $_rest in *:*) _bs=${_rest#*:} ;; esac
		_name=vmlab${_tag}_$_i
		case $_type in
		rd)
			_dev=$LIO/core/rd_mcp_$_i/$_name
			mkdir -p "$_dev" || return 1
			_lio_put "$_dev/control" "rd_pages=$((_mib * 256))" || return 1
			;;
		file)
			mkdir -p "$LIO_FILE_DIR" || return 1
			_f=$LIO_FILE_DIR/$_name.img
			truncate -s "${_mib}M" "$_f" || return 1
			_dev=$LIO/core/fileio_$_i/$_name
			mkdir -p "$_dev" || return 1
			_lio_put "$_dev/control" "fd_dev_name=$_f,fd_dev_size=$((_mib * 1048576))" || return 1
			;;
		*)
			echo "lio_target: bad LUN spec '$_spec' (want rd|file:MiB[:BS])" >&2
			return 1
			;;
		esac
		# Enabling resets block_size to the backend's 512; set it after, before export.
		_lio_put "$_dev/enable" 1 || return 1
		[ "$_bs" = 512 ] || _lio_put "$_dev/attrib/block_size" "$_bs" || return 1
		# LIO_WCE=1: report a volatile write cache (WCE), so initiators send SYNCHRONIZE CACHE.
		[ "${LIO_WCE:-0}" = 1 ] && { _lio_put "$_dev/attrib/emulate_write_cache" 1 || return 1; }
		# LIO_TPU=1: thin provisioning, UNMAP and WRITE SAME with UNMAP (fileio punches holes).
		if [ "${LIO_TPU:-0}" = 1 ]; then
			_lio_put "$_dev/attrib/emulate_tpu" 1 || return 1
			_lio_put "$_dev/attrib/emulate_tpws" 1 || return 1
		fi
		mkdir -p "$_tpg/lun/lun_$_i" || return 1
		ln -s "$_dev" "$_tpg/lun/lun_$_i/$_name" || return 1
		_i=$((_i + 1))
	done
	mkdir -p "$_tpg/np/$VMLAB_ADDR:$LIO_PORT" || return 1
	[ "${LIO_ISER:-1}" = 1 ] && { _lio_put "$_tpg/np/$VMLAB_ADDR:$LIO_PORT/iser" 1 || return 1; }
	_lio_put "$_tpg/attrib/generate_node_acls" 1 || return 1
	_lio_put "$_tpg/attrib/cache_dynamic_acls" 1 || return 1
	_lio_put "$_tpg/attrib/demo_mode_write_protect" 0 || return 1
	if [ -n "${LIO_CHAP_USER:-}" ]; then
		_lio_put "$_tpg/auth/userid" "$LIO_CHAP_USER" || return 1
		_lio_put "$_tpg/auth/password" "$LIO_CHAP_PASS" || return 1
		if [ -n "${LIO_CHAP_MUTUAL_USER:-}" ]; then
			_lio_put "$_tpg/auth/userid_mutual" "$LIO_CHAP_MUTUAL_USER" || return 1
			_lio_put "$_tpg/auth/password_mutual" "$LIO_CHAP_MUTUAL_PASS" || return 1
		fi
		_lio_put "$_tpg/attrib/authentication" 1 || return 1
	else
		_lio_put "$_tpg/attrib/authentication" 0 || return 1
	fi
	_lio_put "$_tpg/enable" 1 || return 1
}

lio_iser() {
	_lio_put "$LIO/iscsi/$1/tpgt_1/np/$VMLAB_ADDR:$LIO_PORT/iser" "$2"
}

lio_teardown() {
	[ -d $LIO/iscsi ] || return 0
	for _t in $LIO/iscsi/iqn.* $LIO/iscsi/eui.* $LIO/iscsi/naa.*; do
		[ -d "$_t" ] || continue
		for _tpg in "$_t"/tpgt_*; do
			[ -d "$_tpg" ] || continue
			echo 0 >"$_tpg/enable" 2>/dev/null
			for _np in "$_tpg"/np/*; do
				[ -d "$_np" ] || continue
				[ -f "$_np/iser" ] && [ "$(cat "$_np/iser")" = 1 ] && echo 0 >"$_np/iser"
				rmdir "$_np"
			done
			for _acl in "$_tpg"/acls/*; do
				[ -d "$_acl" ] || continue
				for _ml in "$_acl"/lun_*; do
					[ -d "$_ml" ] || continue
					find "$_ml" -maxdepth 1 -type l -exec rm {} \;
					rmdir "$_ml"
				done
				rmdir "$_acl"
			done
			for _l in "$_tpg"/lun/lun_*; do
				[ -d "$_l" ] || continue
				find "$_l" -maxdepth 1 -type l -exec rm {} \;
				rmdir "$_l"
			done
			rmdir "$_tpg"
		done
		rmdir "$_t"
	done
	for _h in $LIO/core/*_*; do
		[ -d "$_h" ] || continue
		for _d in "$_h"/*; do
			[ -d "$_d" ] && rmdir "$_d"
		done
		rmdir "$_h" 2>/dev/null
	done
	rm -rf "$LIO_FILE_DIR"
	[ -z "$(ls $LIO/iscsi 2>/dev/null | grep -e '^iqn\.' -e '^eui\.' -e '^naa\.')" ] || {
		echo "lio_teardown: targets left: $(ls $LIO/iscsi)" >&2
		return 1
	}
}

# ---- open-iscsi ----

iscsid_start() {
	need_module iscsi_tcp ib_iser sd_mod
	pidof iscsid >/dev/null && return 0
	mkdir -p /run/lock/iscsi /etc/iscsi/nodes /etc/iscsi/send_targets
	iscsid || return 1
	wait_for 10 test -S /run/iscsid.sock -o -n "$(pidof iscsid)"
}

# iscsi_disk IQN [LUN]: /dev/sdX of LUN of the logged-in session to IQN (waits up to 20 s).
iscsi_disk() {
	_iqn=$1
	_lun=${2:-0}
	_n=100
	while [ $_n -gt 0 ]; do
		for _s in /sys/class/iscsi_session/session*; do
			[ "$(cat "$_s/targetname" 2>/dev/null)" = "$_iqn" ] || continue
			for _b in "$_s"/device/target*/*:*:*:"$_lun"/block/*; do
				[ -e "$_b" ] || continue
				_d=/dev/$(basename "$_b")
				[ -b "$_d" ] && {
					echo "$_d"
					return 0
				}
			done
		done
		_n=$((_n - 1))
		sleep 0.2
	done
	echo "iscsi_disk: no disk for $_iqn LUN $_lun" >&2
	return 1
}

iscsi_login() {
	_iqn=$1
	_tr=$2
	_portal=${3:-$VMLAB_ADDR:$LIO_PORT}
	case $_tr in
	iser) _if=iser ;;
	tcp) _if=default ;;
	*)
		echo "iscsi_login: transport '$_tr' is not iser or tcp" >&2
		return 1
		;;
	esac
	iscsid_start || return 1
	iscsiadm -m discovery -t sendtargets -p "$_portal" -I "$_if" >/dev/null || {
		echo "iscsi_login: discovery at $_portal over $_tr failed" >&2
		return 1
	}
	# An IQN the portal did not list still gets a node record, so the target itself answers
	# the login (a wrong IQN then fails with the target's "not found" status).
	if ! iscsiadm -m node -T "$_iqn" -p "$_portal" -I "$_if" >/dev/null 2>&1; then
		iscsiadm -m node -o new -T "$_iqn" -p "$_portal" -I "$_if" >/dev/null || return 1
	fi
	# One login attempt, not open-iscsi's eight: a refused login fails in seconds.
	iscsiadm -m node -T "$_iqn" -p "$_portal" -I "$_if" -o update \
		-n node.session.initial_login_retry_max -v "${ISCSI_LOGIN_RETRIES:-1}" >/dev/null || return 1
	if [ -n "${ISCSI_CHAP_USER:-}" ]; then
		_u() { iscsiadm -m node -T "$_iqn" -p "$_portal" -I "$_if" -o update -n "$1" -v "$2" >/dev/null; }
		_u node.session.auth.authmethod CHAP || return 1
		_u node.session.auth.username "$ISCSI_CHAP_USER" || return 1
		_u node.session.auth.password "$ISCSI_CHAP_PASS" || return 1
		if [ -n "${ISCSI_CHAP_MUTUAL_USER:-}" ]; then
			_u node.session.auth.username_in "$ISCSI_CHAP_MUTUAL_USER" || return 1
			_u node.session.auth.password_in "$ISCSI_CHAP_MUTUAL_PASS" || return 1
		fi
	fi
	iscsiadm -m node -T "$_iqn" -p "$_portal" -I "$_if" --login >&2 || {
		echo "iscsi_login: login to $_iqn at $_portal over $_tr failed; kernel log:" >&2
		dmesg | tail -n 4 >&2
		return 1
	}
	iscsi_disk "$_iqn" "${ISCSI_LUN:-0}"
}

iscsi_logout_all() {
	pidof iscsid >/dev/null || return 0
	iscsiadm -m node -U all >/dev/null 2>&1
	iscsiadm -m node -o delete >/dev/null 2>&1
	iscsiadm -m discoverydb -t sendtargets -o delete >/dev/null 2>&1
	[ -z "$(ls /sys/class/iscsi_session 2>/dev/null)" ] || {
		echo "iscsi_logout_all: sessions left: $(ls /sys/class/iscsi_session)" >&2
		return 1
	}
}

# ---- tgt ----

tgt_iser() {
	_iqn=$1
	_mib=$2
	need_module rdma_cm ib_uverbs rdma_ucm
	mkdir -p /var/tmp/vmlab-tgt || return 1
	truncate -s "${_mib}M" /var/tmp/vmlab-tgt/lun1.img || return 1
	if ! pidof tgtd >/dev/null; then
		# A 2 GiB guest needs a smaller iSER buffer pool than tgtd's default; the iSCSI/TCP
		# portal moves off 3260 so it cannot clash with LIO.
		tgtd --iser pool_sz_mb=128 --iscsi portal=127.0.0.1:3261 >/tmp/tgtd.log 2>&1 || return 1
		wait_for 10 tgtadm --lld iser --op show --mode target || {
			cat /tmp/tgtd.log >&2
			return 1
		}
	fi
	_t() { tgtadm --lld iser --mode "$@"; }
	_t target --op new --tid 1 -T "$_iqn" || return 1
	_t logicalunit --op new --tid 1 --lun 1 -b /var/tmp/vmlab-tgt/lun1.img || return 1
	_t target --op bind --tid 1 --initiator-address ALL || return 1
	for _n in $(cut -d= -f2 /etc/iscsi/initiatorname.iscsi) ${TGT_INITIATORS:-}; do
		_t target --op bind --tid 1 --initiator-name "$_n" || return 1
	done
}

tgt_stop() {
	pidof tgtd >/dev/null || return 0
	tgtadm --op update --mode sys --name State -v offline >/dev/null 2>&1
	tgtadm --lld iser --op delete --mode target --tid 1 --force >/dev/null 2>&1
	tgtadm --op delete --mode system >/dev/null 2>&1
	wait_for 10 sh -c '! pidof tgtd' || kill -9 $(pidof tgtd) 2>/dev/null
	rm -rf /var/tmp/vmlab-tgt
}

# ---- nbd, ublk ----

nbd_load() {
	need_module nbd
	wait_for 10 test -b /dev/nbd0 || fail "nbd_load: /dev/nbd0 did not appear"
}

ublk_load() {
	need_module ublk_drv
	wait_for 10 test -c /dev/ublk-control || fail "ublk_load: /dev/ublk-control did not appear"
}

# ---- data ----

verify_rw() {
	_dev=$1
	_mib=${2:-16}
	head -c $((_mib * 1048576)) /dev/urandom >/tmp/verify.in || return 1
	dd if=/tmp/verify.in of="$_dev" bs=1M oflag=direct conv=fsync status=none || return 1
	echo 3 >/proc/sys/vm/drop_caches
	dd if="$_dev" of=/tmp/verify.out bs=1M count="$_mib" iflag=direct status=none || return 1
	_a=$(sha256sum </tmp/verify.in | cut -d' ' -f1)
	_b=$(sha256sum </tmp/verify.out | cut -d' ' -f1)
	rm -f /tmp/verify.in /tmp/verify.out
	[ "$_a" = "$_b" ] || {
		echo "verify_rw: $_dev read back $_b, wrote $_a" >&2
		return 1
	}
	echo "verify_rw: $_dev $_mib MiB sha256 $_a ok"
}

# fio_run DEV OUT.json RW BS QD [SECONDS]
fio_run() {
	fio --name=vmlab --filename="$1" --output-format=json --output="$2" --rw="$3" --bs="$4" \
		--iodepth="$5" --runtime="${6:-$VMLAB_FIO_SECONDS}" --ramp_time=1 --time_based \
		--direct=1 --ioengine=libaio --numjobs=1 --group_reporting --randrepeat=0 \
		--norandommap >/dev/null || {
		echo "fio_run: fio $3 $4 QD$5 on $1 failed" >&2
		return 1
	}
}

# The baseline workloads (name:rw:bs:qd): the four of the brief, plus 256k-seqread-qd8, the
# largest sequential read libiscsi's iSER path can do, so its row has a kernel counterpart.
VMLAB_WORKLOADS="4k-randread-qd32:randread:4k:32 4k-randwrite-qd32:randwrite:4k:32 1m-seqread-qd8:read:1M:8 1m-seqwrite-qd8:write:1M:8 256k-seqread-qd8:read:256k:8"

fio_baseline() {
	_dev=$1
	_ini=$2
	_sec=${3:-$VMLAB_FIO_SECONDS}
	_dir=${VMLAB_RESULTS:-/tmp}
	for _w in $VMLAB_WORKLOADS; do
		IFS=: read -r _wn _rw _bs _qd <<EOF
$_w
EOF
		fio_run "$_dev" "$_dir/fio-$_ini-$_wn.json" "$_rw" "$_bs" "$_qd" "$_sec" || return 1
		fio_json_row "$_ini" "$_wn" "$_dir/fio-$_ini-$_wn.json" || return 1
	done
}

fio_json_row() {
	case $2 in *write*) _fdir=write ;; *) _fdir=read ;; esac
	_row=$(jq -c --arg i "$1" --arg w "$2" --arg d "$_fdir" '
		.jobs[0][$d] as $j
		| {initiator: $i, workload: $w, iops: ($j.iops * 10 | round / 10),
		   mbps: ($j.bw_bytes / 1e5 | round / 10), lat_us: ($j.clat_ns.mean / 100 | round / 10),
		   p99_us: (($j.clat_ns.percentile["99.000000"] // 0) / 1000 | round),
		   runtime_s: (.jobs[0].job_runtime / 1000), tool: "fio"}
		| if .iops > 0 then . else error("zero IOPS") end' "$3") || {
		echo "fio_json_row: no $_fdir result in $3" >&2
		return 1
	}
	mkdir -p "$(dirname "$VMLAB_BENCH_JSON")"
	echo "$_row" >>"$VMLAB_BENCH_JSON"
	echo "bench: $_row"
}

bench_row() {
	_bi=$1 _bw=$2 _iops=$3 _mbps=$4
	shift 4
	_lat=
	case ${1:-} in *=*) ;; ?*)
		_lat=$1
		shift
		;;
	esac
	_row=$(jq -cn --arg i "$_bi" --arg w "$_bw" --arg iops "$_iops" --arg mbps "$_mbps" --arg lat "$_lat" \
		'{initiator: $i, workload: $w, iops: ($iops | tonumber), mbps: ($mbps | tonumber)}
		 + (if $lat == "" then {} else {lat_us: ($lat | tonumber)} end)
		 + ($ARGS.positional | map(split("=") | {key: .[0], value: (.[1:] | join("=") | (tonumber? // .))}) | from_entries)' \
		--args "$@") || {
		echo "bench_row: bad row $_bi $_bw $_iops $_mbps $*" >&2
		return 1
	}
	mkdir -p "$(dirname "$VMLAB_BENCH_JSON")"
	echo "$_row" >>"$VMLAB_BENCH_JSON"
	echo "bench: $_row"
}

# iscsi_perf_row INITIATOR WORKLOAD URL BLOCKS QD [SECONDS]: libiscsi's iscsi-perf reads
# (random when WORKLOAD contains "rand") -> one bench row. libiscsi 1.19's iSER path fails
# commands above 256 KiB, so keep BLOCKS x block size <= 256 KiB.
iscsi_perf_row() {
	_pi=$1 _pw=$2 _purl=$3 _pb=$4 _pq=$5 _ps=${6:-$VMLAB_FIO_SECONDS}
	_pr=
	case $_pw in *rand*) _pr=-r ;; esac
	_pbs=$(iscsi-readcapacity16 "$_purl" | sed -n 's/^LOGICAL BLOCK LENGTH IN BYTES://p')
	[ -n "$_pbs" ] || {
		echo "iscsi_perf_row: iscsi-readcapacity16 $_purl failed" >&2
		return 1
	}
	_plog=${VMLAB_RESULTS:-/tmp}/iscsi-perf-$_pi-$_pw.log
	timeout -s INT $((_ps + 30)) iscsi-perf -m "$_pq" -b "$_pb" -t "$_ps" $_pr "$_purl" 2>&1 |
		tr '\r' '\n' >"$_plog"
	_piops=$(sed -n 's/^iops average \([0-9]*\) .*/\1/p' "$_plog" | tail -n1)
	grep -q '^finished' "$_plog" && [ -n "$_piops" ] && [ "$_piops" -gt 0 ] || {
		echo "iscsi_perf_row: iscsi-perf on $_purl did not finish:" >&2
		tail -n 5 "$_plog" >&2
		return 1
	}
	bench_row "$_pi" "$_pw" "$_piops" "$(echo "$_piops $_pb $_pbs" | awk '{ printf "%.1f", $1 * $2 * $3 / 1e6 }')" \
		runtime_s="$_ps" tool=iscsi-perf xfer_bytes=$((_pb * _pbs))
}

bench_table() {
	jq -r -s -f "$VMLAB_SRC/scripts/vmlab/table.jq" "${1:-$VMLAB_BENCH_JSON}"
}

# ---- runner ----

vmlab_reset() {
	_r=0
	iscsi_logout_all || _r=1
	tgt_stop
	lio_teardown || _r=1
	return $_r
}

# vmlab_run_dir DIR: run DIR/NN-*.sh in order (ISER_VMLAB_TESTS: space-separated glob patterns
# on the file name to select a subset), log each, write summary.txt; nonzero if any failed.
vmlab_run_dir() {
	_dir=$1
	_fails=0
	_count=0
	: >"$VMLAB_OUT/summary.txt"
	for _t in "$_dir"/[0-9][0-9]-*.sh; do
		[ -e "$_t" ] || continue
		_base=$(basename "$_t" .sh)
		if [ -n "${ISER_VMLAB_TESTS:-}" ]; then
			_sel=0
			for _p in $ISER_VMLAB_TESTS; do
				case $_base.sh in $_p | $_p.sh) _sel=1 ;; esac
			done
			[ $_sel = 1 ] || continue
		fi
		_count=$((_count + 1))
		export VMLAB_RESULTS="$VMLAB_OUT/$_base"
		mkdir -p "$VMLAB_RESULTS"
		_t0=$(date +%s)
		vmlab_log "RUN  $_base"
		if [ ! -x "$_t" ]; then
			echo "FAIL $_t is not executable" >"$VMLAB_RESULTS/log"
			_rc=126
		else
			(cd "$VMLAB_RESULTS" && exec timeout -k 5 "${VMLAB_TEST_TIMEOUT:-300}" "$_t") >"$VMLAB_RESULTS/log" 2>&1
			_rc=$?
		fi
		_dt=$(($(date +%s) - _t0))
		if [ $_rc = 0 ]; then
			vmlab_log "PASS $_base (${_dt} s)"
			echo "PASS $_base ${_dt}s" >>"$VMLAB_OUT/summary.txt"
		else
			[ $_rc = 124 ] && echo "FAIL timeout after ${VMLAB_TEST_TIMEOUT:-300} s" >>"$VMLAB_RESULTS/log"
			_why=$(grep '^FAIL' "$VMLAB_RESULTS/log" | tail -n1)
			vmlab_log "FAIL $_base (exit $_rc, ${_dt} s): ${_why:-see $_base/log}"
			tail -n 12 "$VMLAB_RESULTS/log" | sed "s/^/vmlab:   | /"
			echo "FAIL $_base ${_dt}s exit=$_rc ${_why}" >>"$VMLAB_OUT/summary.txt"
			_fails=$((_fails + 1))
		fi
		vmlab_reset >>"$VMLAB_RESULTS/log" 2>&1 || {
			vmlab_log "FAIL reset after $_base (see $_base/log)"
			echo "FAIL reset-after-$_base" >>"$VMLAB_OUT/summary.txt"
			_fails=$((_fails + 1))
		}
	done
	if [ $_count = 0 ]; then
		vmlab_log "FAIL no tests selected in $_dir (ISER_VMLAB_TESTS='${ISER_VMLAB_TESTS:-}')"
		return 1
	fi
	vmlab_log "$((_count - _fails))/$_count passed"
	[ $_fails = 0 ]
}
