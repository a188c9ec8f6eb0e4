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
#                              LIO_CHAP_MUTUAL_USER/LIO_CHAP_MUTUAL_PASS (mutual CHAP),
#                              LIO_SERIAL=1 (a unit serial, so each LU has an NAA name)
#                              or dm (iblock on a dm-linear device over a loop file; see
#                              lio_dm); file:3145728 is a sparse 3 TiB LUN
#   lio_iser IQN 0|1           turn iSER off/on on the target's portal
#   lio_dm IQN LUN suspend|resume   suspend (commands to the LUN stop completing, the target
#                              still answers NOPs) or resume the dm device of a dm: LUN
#   lio_teardown               remove every LIO target and backstore
# Kernel initiator (open-iscsi)
#   iscsi_login IQN iser|tcp [ADDR:PORT]   login (SendTargets first over tcp only); prints
#                              the disk (/dev/sdX) of LUN 0 (ISCSI_LUN for another); Env:
#                              ISCSI_CHAP_USER, ISCSI_CHAP_PASS, ISCSI_CHAP_MUTUAL_USER,
#                              ISCSI_CHAP_MUTUAL_PASS
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
#   fio_run DEV OUT.json RW BS QD [SECONDS] [JOBS]   one fio workload, JSON output; DEV a
#                              block device (libaio, O_DIRECT) or an nbd:// / nbd+unix:// URI
#                              (fio's nbd engine, one NBD connection per job)
#   fio_baseline DEV INITIATOR [SECONDS] [PID]      the workloads of VMLAB_WORKLOADS -> bench
#                              rows; with PID, each row also gets PID's CPU time per I/O
#   fio_json_row INITIATOR WORKLOAD FIO.json [KEY=VALUE...]   one bench row from fio's JSON
#   paired_rows DEV_A INI_A DEV_B INI_B [ROUNDS]   both devices in turn, round by round -> rows
#                              of kind "paired" (B's IOPS over A's per round, their median)
#   bench_row INITIATOR WORKLOAD IOPS MBPS [LAT_US] [KEY=VALUE...]
#   iscsi_perf_row INITIATOR WORKLOAD URL BLOCKS QD [SECONDS]   libiscsi iscsi-perf -> row
#   proc_cpu_ticks PID         utime + stime of process PID (all threads), clock ticks
#   cpu_meter_start PID, cpu_meter_end PID BS FIO.json   PID's CPU time per I/O between them
#                              -> "cpu_us_per_io=... cpu_s=... cpu_ios=... cpu_ios_from=..."
#   daemon_idle_cpu PID [SECONDS]   PID's CPU share without I/O -> "idle_cpu_pct=N"
#   daemon_mem_row INITIATOR PID [KEY=VALUE...]   PID's VmLck/VmPin/VmRSS/VmHWM -> a memory row
#   vol_pid NAME               the pid of the daemon serving attached volume NAME
#   bench_table [FILE]         the side-by-side table (ratios against kernel-iser)
# Runner (used by init.sh)
#   vmlab_reset, vmlab_run_dir DIR
# Fault injection (recovery tests; section at the end of this file)
#   lio_tpg IQN 0|1            TPG off (every session dropped, logins refused) or on again
#   fault_lio_restart IQN SEC  the LIO target "restarts": TPG off for SEC seconds, then on
#   lio_portal_add IQN ADDR:PORT, lio_portal_del IQN ADDR:PORT   another network portal on
#                              the TPG (iSER unless LIO_ISER=0) / remove one (its sessions stay)
#   rxe_counter NAME [LINK]    an rxe hardware counter (rdma statistic), e.g. link_downed
#   fault_link_flap SEC [NETDEV]   rxe netdev down for SEC seconds, up, rxe port ACTIVE again;
#                              fails unless rxe counted the link going down (caution: see below)
#   rxe_gsi_state [LINK]       state of rxe's GSI QP1 (RTS; ERR = RDMA CM dead, see below)
#   tcp_partition PORT 1|0     silently drop every TCP packet to/from PORT on lo, or stop
#   fault_tcp_partition PORT SEC   TCP PORT partitioned for SEC seconds; fails unless packets
#                              were dropped
#   tgt_kill                   SIGKILL tgtd, wait until it is gone
#   rerun_if_died PROC RESTART CMD...   CMD, and when it failed with no PROC running any more
#                              (a peer that died under it), RESTART and CMD once more (RERUN=1)
#   fault_tgt_restart IQN MiB SEC  tgtd killed, SEC seconds later started again and the
#                              target re-created on the same backing file (tgt_iser); an iSER
#                              login (iser-attach info) checks that the new tgtd takes connections
#   fault_daemon_kill NAME     SIGKILL the iser-attach daemon serving volume NAME
#   fio_fault_start NAME DEV OFFSET SIZE SEED   background fio (FIO_PID): random writes with
#                              crc32c headers, rate-capped to outlast a fault, then all read back
#   fio_fault_wait NAME        wait for it: exit 0 and every written byte read back and verified
#                              (FIO_FAULT_RW=read: verifying reads of what fio_fill wrote)
#   fio_fill NAME DEV OFFSET SIZE SEED   sequential 64 KiB writes with crc32c headers
#   io_expect_eio DEV BLOCK MIN MAX   a 4 KiB O_DIRECT write fails with EIO after MIN..MAX s
#   vol_status NAME, vol_wait NAME JQ SEC   iser-attach list --json: a volume's status / poll
#                              until the jq condition holds
#   vol_watch_start NAME DEV FILE, vol_watch_stop   sample state and device presence (0.5 s)
#   dev_present DEV            the device node exists and its disk has a size
#   vol_log_mark NAME, vol_warns NAME MARK [PREFIX]   the daemon log (JSON) position / its
#                              warn and error lines since MARK (also in /tmp/vol_warns.txt);
#                              fails unless a warn line carries a cause (error field)
#   lio_sessions IQN           how many sessions the target's TPG has
#   survive_fault NAME DEV LABEL OFFSET SEED FAULT...   fio across FAULT on volume NAME; then
#                              the checks every recovery test makes (see the function)
#   recovery_cleanup NAME...   EXIT trap: detach (or kill) the volumes, keep the daemon logs,
#                              print "faults survived: $FAULTS_SURVIVED"
# Multipath (84-multipath; section at the end of this file)
#   mp_addrs_up, mp_addrs_down the two paths' addresses MP_ADDR_A, MP_ADDR_B (10.99.0.11,
#                              10.99.0.12) as /32s on rxe-net0 next to $VMLAB_ADDR/24
#   lio_mp_target IQN LUN      one LUN behind two TPGs of IQN: tpgt_1 on $MP_ADDR_A:$LIO_PORT,
#                              tpgt_2 on $MP_ADDR_B:$LIO_PORT, iSER on, each TPG's LUN in its own
#                              implicit ALUA target port group (mp_a id 1, mp_b id 2), both
#                              active/optimized; LIO_NONOP_DELAY (ms, LIO's default 100)
#   lio_alua_state IQN TPGT STATE   the ALUA state of TPG TPGT's group: ao, an, standby,
#                              unavailable, transitioning
#   lio_tpgt IQN TPGT 0|1      TPG TPGT off (sessions dropped, logins refused) or on again
#   mp_path_silent A|B 1|0     the path's address removed (packets to it dropped: no reset, no
#                              answer) or back
#   lio_tpg_cmds IQN TPGT      SCSI commands received through TPG TPGT (configfs statistics)
#   mp_disks IQN, mp_rtpg_states DISK, mp_vpd_tpg DISK   open-iscsi's disks per portal; REPORT
#                              TARGET PORT GROUPS ("ID STATE" lines, sg_rtpg); VPD 0x83's group
#   mp_kernel_check IQN        open-iscsi iSER logins to both portals: TPGS=1, each disk's VPD
#                              0x83 group, and sg_rtpg showing the states lio_alua_state sets

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
	# The port can be ACTIVE before the address's RoCE v2 GID is in its table (rxe adds
	# GIDs from a workqueue on the netdev's address event); until it is there, RDMA CM finds
	# no device for the address, and a listen or connect on it fails.
	_gid=$(rxe_gid "$_addr")
	wait_for 10 grep -qx "$_gid" /sys/class/infiniband/rxe0/ports/1/gids/* || {
		echo "rxe_up: no GID $_gid for $_addr on rxe0/1" >&2
		return 1
	}
}

# rxe_gid IPV4: the IPv4-mapped GID as /sys/class/infiniband/*/ports/*/gids/* prints it.
rxe_gid() {
	_g_old=$IFS
	IFS=.
	# shellcheck disable=SC2086 # split the dotted quad on purpose
	set -- $1
	IFS=$_g_old
	printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n' "$1" "$2" "$3" "$4"
}

# rping_listening: an rping server's cm_id is listening (rdma res show cm_id).
rping_listening() {
	rdma res show cm_id | grep -q 'state LISTEN .* comm rping'
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
	# LIO writes its persistent-reservation state under its dbroot (/etc/target) on every
	# PERSISTENT RESERVE OUT, APTPL or not, and fails the command (NOT READY, logical unit
	# communication failure) when it cannot: targetcli makes the directory, the lab does here.
	mkdir -p "$(cat "$LIO/dbroot" 2>/dev/null || echo /etc/target)/pr" || return 1
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
		dm)
			# iblock on a device-mapper linear device over a loop file: lio_dm can suspend
			# it, so the LUN stops completing commands while the target still answers NOPs.
			need_module dm_mod loop target_core_iblock
			mkdir -p "$LIO_FILE_DIR" || return 1
			_f=$LIO_FILE_DIR/$_name.img
			truncate -s "${_mib}M" "$_f" || return 1
			_loop=$(losetup -f --show "$_f") || return 1
			echo "0 $((_mib * 2048)) linear $_loop 0" | dmsetup create --noudevsync "$_name" || return 1
			dmsetup mknodes "$_name" >/dev/null 2>&1
			[ -b "/dev/mapper/$_name" ] || {
				echo "lio_target: /dev/mapper/$_name did not appear" >&2
				return 1
			}
			_dev=$LIO/core/iblock_$_i/$_name
			mkdir -p "$_dev" || return 1
			_lio_put "$_dev/control" "udev_path=/dev/mapper/$_name" || return 1
			;;
		*)
			echo "lio_target: bad LUN spec '$_spec' (want rd|file|dm:MiB[:BS])" >&2
			return 1
			;;
		esac
		# Enabling resets block_size to the backend's 512; set it after, before export.
		_lio_put "$_dev/enable" 1 || return 1
		[ "$_bs" = 512 ] || _lio_put "$_dev/attrib/block_size" "$_bs" || return 1
		# LIO_SERIAL=1: a unit serial (a UUID, as targetcli sets), from which LIO derives the
		# LU's NAA name in VPD page 0x83; without it a LUN has no LU name. Set before export.
		if [ "${LIO_SERIAL:-0}" = 1 ]; then
			_lio_put "$_dev/wwn/vpd_unit_serial" "$(cat /proc/sys/kernel/random/uuid)" || return 1
		fi
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

lio_dm() {
	_dm_n=vmlab$(echo "$1" | cksum | cut -d' ' -f1)_$2
	dmsetup --noudevsync "$3" "$_dm_n"
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
			[ -d "$_d" ] || continue
			# ALUA target port groups made with mkdir (lio_mp_target) go first.
			for _ag in "$_d"/alua/*; do
				[ -d "$_ag" ] && [ "${_ag##*/}" != default_tg_pt_gp ] && rmdir "$_ag"
			done
			rmdir "$_d"
		done
		rmdir "$_h" 2>/dev/null
	done
	# dm LUNs (lio_target dm:...): their dm devices and loop devices.
	for _d in $(dmsetup ls 2>/dev/null | awk '$1 ~ /^vmlab[0-9]+_[0-9]+$/ { print $1 }'); do
		dmsetup resume "$_d" >/dev/null 2>&1
		dmsetup remove --noudevsync "$_d" || return 1
	done
	for _f in "$LIO_FILE_DIR"/*.img; do
		[ -e "$_f" ] || continue
		for _l in $(losetup -j "$_f" 2>/dev/null | cut -d: -f1); do losetup -d "$_l"; done
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
	# No SendTargets over iSER: open-iscsi runs it as a kernel discovery session over
	# ib_iser, which on 7.2 sometimes times out, after which iscsiadm segfaults and leaves
	# a session nobody can log out (twice in e2e-7 runs, 2026-12-04). tgt's iSER
	# portal offers no TCP discovery, and iser-attach itself discovers over TCP only; the
	# node record below is all a login needs.
	if [ "$_tr" = tcp ]; then
		iscsiadm -m discovery -t sendtargets -p "$_portal" -I "$_if" >/dev/null || {
			echo "iscsi_login: discovery at $_portal over $_tr failed" >&2
			return 1
		}
	fi
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
		# portal moves off 3260 so it cannot clash with LIO. Right after a killed tgtd the
		# new one may come up without its RDMA CM listener (every connect is then rejected
		# with reason 8 for good): start it again until it listens on 3260 (3 tries).
		for _try in 1 2 3; do
			tgtd --iser pool_sz_mb=128 --iscsi portal=127.0.0.1:3261 >/tmp/tgtd.log 2>&1 || return 1
			wait_for 10 tgtadm --lld iser --op show --mode target || {
				cat /tmp/tgtd.log >&2
				return 1
			}
			_tp=$(pidof tgtd) || return 1 # the killed tgtd's cm_ids are gone with it
			wait_for 10 sh -c "rdma res show cm_id | grep -q 'state LISTEN .* comm tgtd src-addr 0.0.0.0:3260'" && break
			echo "tgt_iser: tgtd ($_tp) has no RDMA listener on 3260 (try $_try): restarting it" >&2
			cat /tmp/tgtd.log >&2
			# shellcheck disable=SC2086
			kill -9 $_tp
			wait_for 10 sh -c '! pidof tgtd' || return 1
			[ "$_try" = 3 ] && return 1
			sleep 2
		done
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
	# A tgtd that stopped answering would hold tgtadm for good: 5 s each, then SIGKILL.
	timeout 5 tgtadm --op update --mode sys --name State -v offline >/dev/null 2>&1
	timeout 5 tgtadm --lld iser --op delete --mode target --tid 1 --force >/dev/null 2>&1
	timeout 5 tgtadm --op delete --mode system >/dev/null 2>&1
	wait_for 10 sh -c '! pidof tgtd >/dev/null' || {
		kill -9 $(pidof tgtd) 2>/dev/null
		wait_for 10 sh -c '! pidof tgtd >/dev/null'
	}
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

# fio_run DEV OUT.json RW BS QD [SECONDS] [JOBS]: JOBS fio jobs (default 1) of RW at BS and QD
# each, reported as one (--group_reporting: jobs[0] holds their sum). DEV nbd://... or
# nbd+unix://... runs fio's nbd engine (libnbd; every job opens its own NBD connection) on the
# first 256 MiB; anything else is a block device, libaio with O_DIRECT. fio's stderr goes to
# OUT.json.err.
fio_run() {
	case $1 in
	nbd://* | nbd+unix://*) _fr_e=--ioengine=nbd _fr_f=--uri=$1 _fr_o=--size=256M ;;
	*) _fr_e=--ioengine=libaio _fr_f=--filename=$1 _fr_o=--direct=1 ;;
	esac
	fio --name=vmlab "$_fr_e" "$_fr_f" "$_fr_o" --output-format=json --output="$2" --rw="$3" \
		--bs="$4" --iodepth="$5" --runtime="${6:-$VMLAB_FIO_SECONDS}" --ramp_time=1 --time_based \
		--numjobs="${7:-1}" --group_reporting --randrepeat=0 --norandommap >/dev/null 2>"$2.err" || {
		echo "fio_run: fio $3 $4 QD$5 x${7:-1} on $1 failed:" >&2
		tail -n 5 "$2.err" >&2
		return 1
	}
}

# The workloads, name:rw:bs:qd[:jobs] (jobs: fio's numjobs, default 1), each compared with the
# kernel's ib_iser: 4k random read and write at QD32, 4k random read at QD1 (its mean latency
# is the figure), 4k random read at QD32 in two jobs (over NBD: two connections), 1M sequential
# read and write at QD8; and 256k-seqread-qd8, the largest sequential read libiscsi's iSER path
# can do, so its row has a kernel counterpart. Set VMLAB_WORKLOADS on the host for another list.
: "${VMLAB_WORKLOADS:=4k-randread-qd32:randread:4k:32 4k-randwrite-qd32:randwrite:4k:32 4k-randread-qd1:randread:4k:1 4k-randread-qd32-2jobs:randread:4k:32:2 1m-seqread-qd8:read:1M:8 1m-seqwrite-qd8:write:1M:8 256k-seqread-qd8:read:256k:8}"

# fio_baseline DEV INITIATOR [SECONDS] [PID]: every workload of VMLAB_WORKLOADS on DEV (see
# fio_run), one row each. With PID (the iser-attach process serving DEV) each row also gets
# PID's CPU time per I/O (cpu_meter_start/cpu_meter_end). A workload fio fails leaves a row
# with the error and the others still run; nonzero when one failed.
fio_baseline() {
	_fb_dev=$1 _fb_ini=$2 _fb_sec=${3:-$VMLAB_FIO_SECONDS} _fb_pid=${4:-} _fb_rc=0
	_fb_dir=${VMLAB_RESULTS:-/tmp}
	for _fb_w in $VMLAB_WORKLOADS; do
		IFS=: read -r _fb_wn _fb_rw _fb_bs _fb_qd _fb_jobs <<EOF
$_fb_w
EOF
		_fb_jobs=${_fb_jobs:-1}
		_fb_out=$_fb_dir/fio-$_fb_ini-$_fb_wn.json
		[ -z "$_fb_pid" ] || cpu_meter_start "$_fb_pid" || return 1
		_fb_s0=$(sys_cpu_ticks)
		if ! fio_run "$_fb_dev" "$_fb_out" "$_fb_rw" "$_fb_bs" "$_fb_qd" "$_fb_sec" "$_fb_jobs"; then
			bench_error_row "$_fb_ini" "$_fb_wn" "$(grep . "$_fb_out.err" | head -n 3 | paste -sd " ")"
			_fb_rc=1
			continue
		fi
		_fb_s1=$(sys_cpu_ticks)
		_fb_cpu=$(sys_cpu_share "$_fb_s0" "$_fb_s1" "$(fio_json "$_fb_out" | jq '.jobs[0] | .read.iops + .write.iops')") || return 1
		if [ -n "$_fb_pid" ]; then
			_fb_cpu="$_fb_cpu $(cpu_meter_end "$_fb_pid" "$_fb_bs" "$_fb_out")" || return 1
		fi
		# shellcheck disable=SC2086 # _fb_cpu is KEY=VALUE words
		fio_json_row "$_fb_ini" "$_fb_wn" "$_fb_out" jobs="$_fb_jobs" $_fb_cpu || return 1
	done
	return $_fb_rc
}

# strace_calls FILE SYSCALL: the calls column of strace -c's summary FILE for SYSCALL ("total":
# every call), 0 when it is not there.
strace_calls() {
	awk -v s="$2" '$NF == s && $4 ~ /^[0-9]+$/ { print $4; found = 1; exit } END { if (!found) print 0 }' "$1"
}

# The workloads syscall_rows counts system calls in: name:rw:bs:qd, SECONDS each.
: "${VMLAB_SYSCALL_WORKLOADS:=4k-randread-qd1:randread:4k:1 4k-randread-qd32:randread:4k:32}"
: "${VMLAB_SYSCALL_SECONDS:=3}"

# syscall_rows DEV INITIATOR PID: for each VMLAB_SYSCALL_WORKLOADS workload, fio on DEV while
# strace -f -c counts the system calls of process PID (every thread; the iser-attach daemon
# serving DEV): a row of kind "syscalls" with fio's I/Os, the io_uring_enter calls and all
# calls, and each per I/O. strace stops the daemon at every call, so it serves slower than
# without: the counts per I/O are the figure, not the IOPS. fio's ramp second is counted by
# strace and not by fio, so the counts per I/O come out a little high.
syscall_rows() {
	_sr_dev=$1 _sr_ini=$2 _sr_pid=$3 _sr_dir=${VMLAB_RESULTS:-/tmp}
	for _sr_w in $VMLAB_SYSCALL_WORKLOADS; do
		_sr_wn=${_sr_w%%:*} _sr_x=${_sr_w#*:}
		_sr_rw=${_sr_x%%:*} _sr_x=${_sr_x#*:}
		_sr_bs=${_sr_x%%:*} _sr_qd=${_sr_x#*:}
		_sr_st=$_sr_dir/strace-$_sr_ini-$_sr_wn.txt _sr_js=$_sr_dir/fio-syscalls-$_sr_ini-$_sr_wn.json
		strace -f -c -q -o "$_sr_st" -p "$_sr_pid" 2>"$_sr_st.err" &
		_sr_sp=$!
		sleep 1 # strace attaches to every thread
		if ! fio_run "$_sr_dev" "$_sr_js" "$_sr_rw" "$_sr_bs" "$_sr_qd" "$VMLAB_SYSCALL_SECONDS" 1; then
			kill -INT "$_sr_sp" 2>/dev/null
			wait "$_sr_sp" 2>/dev/null
			return 1
		fi
		kill -INT "$_sr_sp" 2>/dev/null
		wait "$_sr_sp" 2>/dev/null
		_sr_ios=$(fio_json "$_sr_js" | jq '.jobs[0] | .read.total_ios + .write.total_ios')
		_sr_ent=$(strace_calls "$_sr_st" io_uring_enter) _sr_all=$(strace_calls "$_sr_st" total)
		[ "${_sr_ios:-0}" -gt 0 ] && [ "$_sr_all" -gt 0 ] || {
			echo "syscall_rows: $_sr_wn: ${_sr_ios:-no} I/Os, $_sr_all calls ($(head -c 300 "$_sr_st.err"))" >&2
			return 1
		}
		_bench_append "$(jq -nc --arg i "$_sr_ini" --arg w "$_sr_wn" --argjson n "$_sr_ios" --argjson e "$_sr_ent" \
			--argjson a "$_sr_all" '{initiator: $i, workload: $w, kind: "syscalls", ios: $n, io_uring_enter: $e,
			syscalls: $a, enter_per_io: ($e / $n * 100 | round / 100), syscalls_per_io: ($a / $n * 100 | round / 100)}')"
	done
}

# jq: KEY=VALUE arguments ($ARGS.positional) as an object, numbers as numbers.
_BENCH_KV='def kv: map(split("=") | {key: .[0], value: (.[1:] | join("=") | (tonumber? // .))}) | from_entries;'

# _bench_append ROW: one row to $VMLAB_BENCH_JSON, echoed to the log.
_bench_append() {
	mkdir -p "$(dirname "$VMLAB_BENCH_JSON")"
	echo "$1" >>"$VMLAB_BENCH_JSON"
	echo "bench: $1"
}

# fio_json FIO.json: fio's JSON without anything an engine logged before it.
fio_json() {
	sed -n '/^{/,$p' "$1"
}

# fio_json_row INITIATOR WORKLOAD FIO.json [KEY=VALUE...]: the row of one fio result: IOPS,
# MB/s, mean and p99 completion latency of the workload's direction (write when WORKLOAD says
# so), over all jobs (--group_reporting), its I/O count (ios) and runtime, plus KEY=VALUE.
fio_json_row() {
	_fj_i=$1 _fj_w=$2 _fj_f=$3
	shift 3
	case $_fj_w in *write*) _fdir=write ;; *) _fdir=read ;; esac
	_row=$(fio_json "$_fj_f" | jq -c --arg i "$_fj_i" --arg w "$_fj_w" --arg d "$_fdir" "$_BENCH_KV"'
		.jobs[0][$d] as $j
		| {initiator: $i, workload: $w, iops: ($j.iops * 10 | round / 10),
		   mbps: ($j.bw_bytes / 1e5 | round / 10), lat_us: ($j.clat_ns.mean / 100 | round / 10),
		   p99_us: (($j.clat_ns.percentile["99.000000"] // 0) / 1000 | round),
		   ios: $j.total_ios, runtime_s: ($j.runtime / 1000), tool: "fio"}
		+ ($ARGS.positional | kv)
		| if .iops > 0 then . else error("zero IOPS") end' --args "$@") || {
		echo "fio_json_row: no $_fdir result in $_fj_f" >&2
		return 1
	}
	_bench_append "$_row"
}

# paired_rows DEV_A INI_A DEV_B INI_B [ROUNDS]: each workload of VMLAB_PAIRED_WORKLOADS (default
# VMLAB_WORKLOADS) ROUNDS times (3) on both devices in turn, A then B, and B then A in the next
# round, so that a slow spell of the host falls on both sides alike: one row of kind "paired"
# per workload with B's IOPS over A's in each round (ratios) and their median (median_ratio).
# Both devices stay attached throughout; each run is fio_run's (VMLAB_FIO_SECONDS).
paired_rows() {
	_pr_a=$1 _pr_ia=$2 _pr_b=$3 _pr_ib=$4 _pr_n=${5:-3} _pr_rc=0
	_pr_dir=${VMLAB_RESULTS:-/tmp}
	for _pr_w in ${VMLAB_PAIRED_WORKLOADS:-$VMLAB_WORKLOADS}; do
		IFS=: read -r _pr_wn _pr_rw _pr_bs _pr_qd _pr_jobs <<EOF
$_pr_w
EOF
		case $_pr_wn in *write*) _pr_d=write ;; *) _pr_d=read ;; esac
		_pr_ra= _pr_k=1
		while [ "$_pr_k" -le "$_pr_n" ]; do
			_pr_order="a b"
			[ $((_pr_k % 2)) = 0 ] && _pr_order="b a"
			for _pr_s in $_pr_order; do
				if [ "$_pr_s" = a ]; then _pr_dev=$_pr_a; else _pr_dev=$_pr_b; fi
				fio_run "$_pr_dev" "$_pr_dir/fio-paired-$_pr_wn-$_pr_s-$_pr_k.json" "$_pr_rw" "$_pr_bs" "$_pr_qd" \
					"" "${_pr_jobs:-1}" || _pr_rc=1
			done
			_pr_r=$(jq -n --arg d "$_pr_d" --slurpfile a "$_pr_dir/fio-paired-$_pr_wn-a-$_pr_k.json" \
				--slurpfile b "$_pr_dir/fio-paired-$_pr_wn-b-$_pr_k.json" \
				'$b[0].jobs[0][$d].iops / $a[0].jobs[0][$d].iops * 100 | round / 100' 2>/dev/null) || _pr_r=
			if [ -z "$_pr_r" ]; then
				_pr_rc=1
				_pr_r=null
			fi
			_pr_ra="$_pr_ra${_pr_ra:+,}$_pr_r"
			_pr_k=$((_pr_k + 1))
		done
		_bench_append "$(jq -cn --arg w "$_pr_wn" --arg a "$_pr_ia" --arg b "$_pr_ib" --argjson r "[$_pr_ra]" '
			{kind: "paired", workload: $w, initiator: $b, against: $a, rounds: ($r | length), ratios: $r}
			+ ([$r[] | numbers] | sort | if length == 0 then {} else {median_ratio: .[(length - 1) / 2 | floor]} end)')" || _pr_rc=1
	done
	return $_pr_rc
}

# bench_error_row INITIATOR WORKLOAD MSG: a row saying the workload failed, and why.
bench_error_row() {
	_bench_append "$(jq -cn --arg i "$1" --arg w "$2" --arg e "$3" '{initiator: $i, workload: $w, error: $e}')"
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
	_row=$(jq -cn --arg i "$_bi" --arg w "$_bw" --arg iops "$_iops" --arg mbps "$_mbps" --arg lat "$_lat" "$_BENCH_KV"'
		{initiator: $i, workload: $w, iops: ($iops | tonumber), mbps: ($mbps | tonumber)}
		 + (if $lat == "" then {} else {lat_us: ($lat | tonumber)} end)
		 + ($ARGS.positional | kv)' \
		--args "$@") || {
		echo "bench_row: bad row $_bi $_bw $_iops $_mbps $*" >&2
		return 1
	}
	_bench_append "$_row"
}

# iscsi_perf_row INITIATOR WORKLOAD URL BLOCKS QD [SECONDS]: libiscsi's iscsi-perf reads
# (random when WORKLOAD contains "rand") -> one bench row. iscsi-perf reports IOPS only; the
# row's lat_us is QD / IOPS (Little's law: the mean latency while QD commands are always in
# flight; lat_from says so). libiscsi 1.19's iSER path fails commands above 256 KiB, so keep
# BLOCKS x block size <= 256 KiB.
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
	_ps0=$(sys_cpu_ticks)
	timeout -s INT $((_ps + 30)) iscsi-perf -m "$_pq" -b "$_pb" -t "$_ps" $_pr "$_purl" 2>&1 |
		tr '\r' '\n' >"$_plog"
	_ps1=$(sys_cpu_ticks)
	_piops=$(sed -n 's/^iops average \([0-9]*\) .*/\1/p' "$_plog" | tail -n1)
	grep -q '^finished' "$_plog" && [ -n "$_piops" ] && [ "$_piops" -gt 0 ] || {
		echo "iscsi_perf_row: iscsi-perf on $_purl did not finish:" >&2
		tail -n 5 "$_plog" >&2
		return 1
	}
	# shellcheck disable=SC2046 # sys_cpu_share prints KEY=VALUE words
	bench_row "$_pi" "$_pw" "$_piops" "$(echo "$_piops $_pb $_pbs" | awk '{ printf "%.1f", $1 * $2 * $3 / 1e6 }')" \
		"$(echo "$_pq $_piops" | awk '{ printf "%.1f", $1 * 1e6 / $2 }')" lat_from=qd/iops \
		runtime_s="$_ps" tool=iscsi-perf xfer_bytes=$((_pb * _pbs)) $(sys_cpu_share "$_ps0" "$_ps1" "$_piops")
}

# size_bytes SIZE: fio's 4k, 256k, 1M (binary units) or a plain number, in bytes.
size_bytes() {
	case $1 in
	*[kK]) echo $((${1%?} * 1024)) ;;
	*[mM]) echo $((${1%?} * 1048576)) ;;
	*) echo $(($1)) ;;
	esac
}

# proc_cpu_ticks PID: utime + stime of process PID, all its threads, in clock ticks (fields 14
# and 15 of /proc/PID/stat, counted past the ")" that ends the command name).
proc_cpu_ticks() {
	_pct=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null) && [ -n "$_pct" ] || {
		echo "proc_cpu_ticks: no process $1" >&2
		return 1
	}
	echo "$_pct" | awk '{ print $12 + $13 }'
}

# daemon_io_bytes PID: bytes read plus written so far by the iser-attach process PID (attach or
# serve), from its own counters (iser-attach list --json).
daemon_io_bytes() {
	timeout 10 iser-attach list --json 2>/dev/null |
		jq -e --argjson p "$1" '[.[] | select(.pid == $p)][0].counters | .read_bytes + .write_bytes'
}

# sys_cpu_ticks: "BUSY TOTAL", the clock ticks all CPUs spent busy (user, nice, system, irq,
# softirq, steal) and in all, from /proc/stat.
sys_cpu_ticks() {
	awk '$1 == "cpu" { b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6; exit }' /proc/stat
}

# sys_cpu_share "BUSY0 TOTAL0" "BUSY1 TOTAL1" IOPS: the whole machine's CPU over a run, as
# "sys_busy_pct=P sys_us_per_io=U": the busy share of all CPUs (every process and the kernel:
# the application, the initiator, rxe and the LIO target alike) and that busy time per I/O at
# the run's rate (P x CPUs / IOPS). The rows of every initiator carry it, so the cost of a
# whole I/O path compares across them (docs/vmlab.md).
sys_cpu_share() {
	echo "$1 $2" | awk -v n="$(nproc)" -v iops="$3" '{
		p = ($4 - $2) > 0 ? ($3 - $1) / ($4 - $2) : 0
		printf "sys_busy_pct=%.1f sys_us_per_io=%.1f\n", p * 100, (iops > 0 ? p * n * 1e6 / iops : 0) }'
}

# cpu_meter_start PID, then cpu_meter_end PID BS FIO.json: the CPU time process PID used in
# between per I/O of BS bytes: "cpu_us_per_io=N cpu_s=N cpu_ios=N cpu_ios_from=daemon|fio".
# The I/O count is PID's own byte counters over the same interval divided by BS, so the I/O of
# fio's ramp counts as the CPU it cost does, and a request the kernel split counts once; the
# counters are read outside the interval. A process iser-attach list does not show falls back
# to fio's count (cpu_ios_from=fio), which leaves the ramp out: that figure is too high by up
# to ramp / runtime.
cpu_meter_start() {
	_cm_b0=$(daemon_io_bytes "$1") || _cm_b0=
	_cm_t0=$(proc_cpu_ticks "$1")
}

cpu_meter_end() {
	_cm_t1=$(proc_cpu_ticks "$1") || return 1
	_cm_b1=
	[ -z "$_cm_b0" ] || _cm_b1=$(daemon_io_bytes "$1") || _cm_b1=
	if [ -n "$_cm_b1" ]; then
		_cm_ios=$(((_cm_b1 - _cm_b0) / $(size_bytes "$2"))) _cm_from=daemon
	else
		_cm_ios=$(fio_json "$3" | jq '.jobs[0] | .read.total_ios + .write.total_ios') _cm_from=fio
	fi
	[ "${_cm_ios:-0}" -gt 0 ] || {
		echo "cpu_meter_end: no I/O counted for process $1" >&2
		return 1
	}
	awk -v t="$((_cm_t1 - _cm_t0))" -v hz="$(getconf CLK_TCK)" -v n="$_cm_ios" -v f="$_cm_from" \
		'BEGIN { printf "cpu_us_per_io=%.1f cpu_s=%.2f cpu_ios=%d cpu_ios_from=%s\n", t / hz * 1e6 / n, t / hz, n, f }'
}

# daemon_idle_cpu PID [SECONDS]: the share of one CPU process PID uses over SECONDS (default 3)
# while nothing does I/O, in percent, as "idle_cpu_pct=N": the part of cpu_us_per_io that
# is not the I/O's own cost (timers, keepalives, samplers), which QD1 rows show most.
daemon_idle_cpu() {
	_di_t0=$(proc_cpu_ticks "$1") || return 1
	sleep "${2:-3}"
	_di_t1=$(proc_cpu_ticks "$1") || return 1
	awk -v t="$((_di_t1 - _di_t0))" -v hz="$(getconf CLK_TCK)" -v s="${2:-3}" \
		'BEGIN { printf "idle_cpu_pct=%.1f\n", t / hz / s * 100 }'
}

# daemon_mem_row INITIATOR PID [KEY=VALUE...]: process PID's memory now, from /proc/PID/status,
# in KiB: VmLck (mlock'ed; locked_kib), VmPin (pinned, as RDMA-registered buffers are, charged
# to RLIMIT_MEMLOCK too; pinned_kib), VmRSS (resident; rss_kib), VmHWM (peak resident;
# hwm_kib) -> a row with workload "daemon-memory" and kind "memory", plus KEY=VALUE.
daemon_mem_row() {
	_dm_i=$1 _dm_p=$2
	shift 2
	_dm_kv=$(awk '$1 ~ /^Vm(Lck|Pin|RSS|HWM):$/ { print $1 $2 }' "/proc/$_dm_p/status" 2>/dev/null)
	[ -n "$_dm_kv" ] || {
		echo "daemon_mem_row: no process $_dm_p" >&2
		return 1
	}
	_row=$(echo "$_dm_kv" | jq -R -s -c --arg i "$_dm_i" --argjson pid "$_dm_p" "$_BENCH_KV"'
		(split("\n") | map(select(. != "") | split(":") | {key: .[0], value: (.[1] | tonumber)})
		 | from_entries) as $m
		| {initiator: $i, workload: "daemon-memory", kind: "memory", pid: $pid,
		   locked_kib: $m.VmLck, pinned_kib: $m.VmPin, rss_kib: $m.VmRSS, hwm_kib: $m.VmHWM}
		+ ($ARGS.positional | kv)' --args "$@") || {
		echo "daemon_mem_row: bad row for $_dm_i: $_dm_kv" >&2
		return 1
	}
	_bench_append "$_row"
}

# vol_pid NAME: the pid of the process serving attached volume NAME: the first field of its
# attach lock file (volume/lock.go: "PID DEVICE"), checked to be a live iser-attach.
vol_pid() {
	_vp=$(cut -d' ' -f1 "/run/iser-attach/$1.lock" 2>/dev/null)
	[ -n "$_vp" ] && [ "$(cat "/proc/$_vp/comm" 2>/dev/null)" = iser-attach ] || {
		echo "vol_pid: no live iser-attach holds /run/iser-attach/$1.lock" >&2
		return 1
	}
	echo "$_vp"
}

bench_table() {
	jq -r -s -f "$VMLAB_SRC/scripts/vmlab/table.jq" "${1:-$VMLAB_BENCH_JSON}"
}

# ---- runner ----

# vmlab_leftovers TEST: what TEST left that the next test would trip on, each named (one line
# for summary.txt, empty when nothing) and removed: iser-attach processes (SIGTERM, then
# SIGKILL after 10 s), ublk devices their daemons left (detach --force of each state file's
# volume), connected nbd devices (nbd-client -d). A failed test's cleanup may not get that far;
# without this, one failure shows up again in later tests that check nothing is left.
vmlab_leftovers() {
	_lo=
	for _p in $(pgrep -x iser-attach); do
		_lo="$_lo iser-attach[$_p]"
		kill -TERM "$_p" 2>/dev/null || true
	done
	for _ in $(seq 50); do
		pgrep -x iser-attach >/dev/null || break
		sleep 0.2
	done
	pkill -KILL -x iser-attach 2>/dev/null && sleep 0.5
	for _s in /run/iser-attach/*.state; do
		[ -e "$_s" ] || continue
		_n=$(basename "$_s" .state)
		if timeout 30 "$VMLAB_BIN/iser-attach" detach --force "$_n" >/dev/null 2>&1; then
			_lo="$_lo left-device:$_n"
		fi
		rm -f "$_s"
	done
	for _b in /sys/block/ublkb*; do
		[ -e "$_b" ] && _lo="$_lo ${_b##*/}(not removed)"
	done
	for _p in /sys/block/nbd*/pid; do
		[ -e "$_p" ] || continue
		_d=${_p%/pid}
		_d=/dev/${_d##*/}
		_lo="$_lo $_d"
		nbd-client -d "$_d" >/dev/null 2>&1
	done
	[ -z "$_lo" ] || echo "LEFT by $1:$_lo"
}

vmlab_reset() {
	_r=0
	iscsi_logout_all || _r=1
	tgt_stop
	lio_teardown || _r=1
	return $_r
}

# vmlab_run_dir DIR: run DIR/NN-*.sh in order (ISER_VMLAB_TESTS: space-separated glob patterns
# on the file name to select a subset; a file with a "# vmlab-opt-in: WHY" line runs only when
# selected so), log each, write summary.txt; nonzero if any failed.
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
		elif grep -q '^# vmlab-opt-in:' "$_t"; then
			# Runs only when ISER_VMLAB_TESTS names it (a test of a feature still being built).
			vmlab_log "SKIP $_base (opt-in:$(sed -n 's/^# vmlab-opt-in://p' "$_t" | head -n1))"
			continue
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
			# A test may declare its own timeout ("# vmlab-timeout: SECONDS");
			# VMLAB_TEST_TIMEOUT set on the host overrides every test's.
			_to=$(sed -n 's/^# vmlab-timeout: *\([0-9][0-9]*\).*/\1/p' "$_t" | head -n1)
			_to=${VMLAB_TEST_TIMEOUT:-${_to:-300}}
			(cd "$VMLAB_RESULTS" && exec timeout -k 5 "$_to" "$_t") >"$VMLAB_RESULTS/log" 2>&1
			_rc=$?
		fi
		_dt=$(($(date +%s) - _t0))
		if [ $_rc = 0 ]; then
			vmlab_log "PASS $_base (${_dt} s)"
			echo "PASS $_base ${_dt}s" >>"$VMLAB_OUT/summary.txt"
		else
			[ $_rc = 124 ] && echo "FAIL timeout after ${_to:-300} s" >>"$VMLAB_RESULTS/log"
			_why=$(grep '^FAIL' "$VMLAB_RESULTS/log" | tail -n1)
			vmlab_log "FAIL $_base (exit $_rc, ${_dt} s): ${_why:-see $_base/log}"
			tail -n 12 "$VMLAB_RESULTS/log" | sed "s/^/vmlab:   | /"
			echo "FAIL $_base ${_dt}s exit=$_rc ${_why}" >>"$VMLAB_OUT/summary.txt"
			_fails=$((_fails + 1))
		fi
		_left=$(vmlab_leftovers "$_base" 2>>"$VMLAB_RESULTS/log")
		if [ -n "$_left" ]; then
			vmlab_log "$_left"
			echo "$_left" >>"$VMLAB_OUT/summary.txt"
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

# --- fault injection (recovery tests) ---

# has_recovery_flags: iser-attach attach knows the recovery options (a binary without them
# fails the recovery tests here, rather than later with a less clear cause).
has_recovery_flags() {
	iser-attach attach --help >/tmp/attach-help.txt 2>&1 || true
	for f in --replacement-timeout --nop-interval --nop-timeout --command-timeout; do
		grep -q -- "$f" /tmp/attach-help.txt || {
			echo "iser-attach attach has no $f"
			return 1
		}
	done
}
# Faults that really break an initiator's connection and really heal, checked against the
# kernel's own initiator (open-iscsi) before the tests used them: disabling the TPG drops the
# sessions at once and LIO refuses logins ("Unable to locate Target Portal Group") until it is
# enabled again; SIGKILL of tgtd disconnects its RDMA connections at once; tcp_partition drops
# every packet of a TCP port on lo (where traffic to the lab's own addresses flows), nothing is
# refused or reset, so only a keepalive notices. A LIO network portal removed with
# lio_portal_del keeps the sessions made through it: pair it with lio_tpg IQN 0 so they must
# log in again elsewhere.
#
# The rxe netdev going down is NOT a survivable fault in this lab. It is real (port DOWN,
# link_downed counted, even rxe's loopback traffic stops), but with rxe (kernel 6.12) any RDMA
# send while the netdev is down fails its route lookup and moves the sending QP to ERR, and
# when that is the GSI QP1 (any RDMA CM message: a reconnect's REQ, a teardown's DREQ) nothing
# ever resets it: no RDMA CM connection works again until the rxe link is deleted and re-added
# (rxe_gsi_state shows ERR). The kernel's ib_iser then hangs in iser_release_work; a
# userspace initiator's reconnects time out. A flap the kernel initiator only notices after
# the link is back (6 s down, 5 s + 5 s ping) heals. fault_link_flap stays for such flaps
# and for a kernel that fixes this; the recovery tests' network fault is tcp_partition.

lio_tpg() {
	_lio_put "$LIO/iscsi/$1/tpgt_1/enable" "$2"
}

fault_lio_restart() {
	lio_tpg "$1" 0 || return 1
	echo "fault: LIO target $1 down (TPG disabled) for $2 s" >&2
	sleep "$2"
	lio_tpg "$1" 1 || return 1
	echo "fault: LIO target $1 up again" >&2
}

lio_portal_add() {
	_np=$LIO/iscsi/$1/tpgt_1/np/$2
	mkdir -p "$_np" || return 1
	if [ "${LIO_ISER:-1}" = 1 ]; then
		_lio_put "$_np/iser" 1 || return 1
	fi
}

lio_portal_del() {
	_np=$LIO/iscsi/$1/tpgt_1/np/$2
	[ -d "$_np" ] || {
		echo "lio_portal_del: $1 has no portal $2" >&2
		return 1
	}
	if [ -f "$_np/iser" ] && [ "$(cat "$_np/iser")" = 1 ]; then
		_lio_put "$_np/iser" 0 || return 1
	fi
	rmdir "$_np"
}

rxe_counter() {
	rdma statistic show link "${2:-rxe0/1}" | tr ' ' '\n' | sed -n "/^$1\$/{n;p;q;}" | grep . || {
		echo "rxe_counter: no counter $1 on ${2:-rxe0/1}" >&2
		return 1
	}
}

fault_link_flap() {
	_fl_dev=${2:-rxe-net0}
	_fl_n0=$(rxe_counter link_downed) || return 1
	ip link set "$_fl_dev" down || return 1
	echo "fault: $_fl_dev down for $1 s" >&2
	sleep "$1"
	_fl_port=$(rdma link show rxe0/1)
	ip link set "$_fl_dev" up || return 1
	echo "fault: $_fl_dev up again" >&2
	wait_for 20 sh -c 'rdma link show rxe0/1 | grep -q "state ACTIVE"' || {
		echo "fault_link_flap: rxe0 port not ACTIVE again: $(rdma link show rxe0/1)" >&2
		return 1
	}
	_fl_n1=$(rxe_counter link_downed) || return 1
	case $_fl_port in *"state ACTIVE"*)
		echo "fault_link_flap: rxe0 port stayed ACTIVE while $_fl_dev was down: $_fl_port" >&2
		return 1
		;;
	esac
	[ "$_fl_n1" -gt "$_fl_n0" ] || {
		echo "fault_link_flap: rxe link_downed stayed $_fl_n0" >&2
		return 1
	}
}

rxe_gsi_state() {
	rdma resource show qp link "${1:-rxe0/1}" lqpn 1 | sed -n 's/.* state \([A-Z_]*\) .*/\1/p'
}

tcp_partition() {
	if [ "$2" = 1 ]; then
		need_module sch_prio cls_u32 act_gact
		tc qdisc add dev lo root handle 1: prio || return 1
		for _tp in dport sport; do
			tc filter add dev lo parent 1: protocol ip prio 1 u32 match ip "$_tp" "$1" 0xffff \
				action drop || return 1
		done
	else
		tc qdisc del dev lo root 2>/dev/null || true
	fi
}

fault_tcp_partition() {
	tcp_partition "$1" 1 || return 1
	echo "fault: TCP port $1 partitioned (every packet dropped, nothing refused) for $2 s" >&2
	sleep "$2"
	_tp_d=$(tc -s filter show dev lo | sed -n 's/.*(dropped \([0-9]*\),.*/\1/p' | awk '{ s += $1 } END { print s + 0 }')
	tcp_partition "$1" 0
	echo "fault: TCP port $1 reachable again ($_tp_d packets dropped)" >&2
	[ "$_tp_d" -gt 0 ] || {
		echo "fault_tcp_partition: no packet to or from port $1 was dropped" >&2
		return 1
	}
}

tgt_kill() {
	_tk=$(pidof tgtd) || {
		echo "tgt_kill: tgtd is not running" >&2
		return 1
	}
	kill -9 $_tk || return 1
	wait_for 10 sh -c '! pidof tgtd' || {
		echo "tgt_kill: tgtd $_tk still there" >&2
		return 1
	}
}

# rerun_if_died PROC RESTART CMD...: CMD; when it fails and the peer died under it, RESTART (a
# command line, split into words) and CMD once more. RERUN is 1 then, else 0; the status is that
# of the last command run. The peer died when no process PROC runs any more, or, with
# RERUN_ALIVE set (a command line), when PROC runs but RERUN_ALIVE fails: a tgtd on its way out
# over iSER stops answering logins (and its management socket) seconds before it exits, so a
# failure seen then would otherwise count as the initiator's.
rerun_if_died() {
	_rd_p=$1 _rd_r=$2
	shift 2
	RERUN=0
	"$@" && return 0
	_rd_why=died
	if pidof "$_rd_p" >/dev/null; then
		[ -n "${RERUN_ALIVE:-}" ] || return 1
		# shellcheck disable=SC2086 # a command line
		$RERUN_ALIVE >/dev/null 2>&1 && return 1
		_rd_why="stopped answering ($RERUN_ALIVE failed)"
	fi
	RERUN=1
	echo "rerun_if_died: $_rd_p $_rd_why during '$*': $_rd_r, then once more" >&2
	# shellcheck disable=SC2086 # a command line
	$_rd_r || return 1
	"$@"
}
# tgt_probe IQN: an iSER login to tgtd's target IQN and out again (iser-attach info); what it
# printed on failure.
tgt_probe() {
	timeout 30 iser-attach --log-level error info --transport iser \
		--portal "$VMLAB_ADDR:3260" --target "$1" --login-timeout 10s 2>&1 >/dev/null
}
fault_tgt_restart() {
	tgt_kill || return 1
	echo "fault: tgtd killed, down for $3 s" >&2
	sleep "$3"
	# A tgtd started right after a killed one sometimes takes no RDMA connection at all,
	# although its listener is there (rdma res show cm_id: LISTEN on 0.0.0.0:3260): every
	# connect is rejected with reason 8 (no listener for the service ID) for as long as that
	# tgtd runs. That is the lab's peer, not the initiator under test: a fresh iSER login
	# (tgt_probe) tells, and such a tgtd is killed and started again (3 tries). Any other
	# login failure fails the fault.
	for _ftr in 1 2 3; do
		tgt_iser "$1" "$2" || return 1
		_ftr_out=$(tgt_probe "$1") && break
		case $_ftr_out in
		*"rejected (reason 8)"*) ;;
		*)
			echo "fault: iSER login to the restarted tgtd failed: $_ftr_out" >&2
			return 1
			;;
		esac
		echo "fault: the restarted tgtd rejects every RDMA connection (reason 8; try $_ftr): restarting it" >&2
		[ "$_ftr" = 3 ] && return 1
		tgt_kill || return 1
		sleep 2
	done
	echo "fault: tgtd up again with target $1" >&2
}

fault_daemon_kill() {
	_dk=$(vol_status "$1" | jq -r .pid) && [ -n "$_dk" ] && [ "$_dk" != null ] || {
		echo "fault_daemon_kill: no daemon for volume $1" >&2
		return 1
	}
	kill -9 "$_dk" || return 1
	wait_for 10 sh -c "! kill -0 $_dk" || return 1
	echo "fault: iser-attach daemon $_dk of $1 killed (SIGKILL)" >&2
}

# fio_fault_start: the write phase takes at least SIZE / FIO_FAULT_RATE (default 2 MiB/s), so
# a fault injected a few seconds in hits writes in flight; fio then reads every block back
# (do_verify) and checks its crc32c, offset and seed: a lost, stale or misplaced write fails.
# Give every run its own SEED (and region), so stale data of an earlier run cannot pass.
# FIO_FAULT_TIMEOUT (default 150 s) bounds it; output in $VMLAB_RESULTS/fio-NAME.json.
# FIO_FAULT_RW=read: sequential 64 KiB reads instead, rate-capped the same way, each block's
# crc32c, offset and seed checked against what fio_fill wrote there (same OFFSET, SIZE, SEED).
fio_fault_start() {
	: >"$VMLAB_RESULTS/fio-$1.err"
	if [ "${FIO_FAULT_RW:-write}" = read ]; then
		_ff_opts="--rw=read --bs=64k --rate=${FIO_FAULT_RATE:-2m},"
	else
		_ff_opts="--rw=randwrite --bs=4k-64k --rate=,${FIO_FAULT_RATE:-2m} --do_verify=1"
	fi
	FIO_FAULT_READ=$(($(echo "$4" | sed 's/[mM]$/ * 1048576/'))) # SIZE: bytes or MiB ("32M")
	timeout -k 5 "${FIO_FAULT_TIMEOUT:-150}" fio --name="$1" --filename="$2" --offset="$3" \
		--size="$4" --randseed="$5" $_ff_opts --iodepth="${FIO_FAULT_QD:-16}" \
		--direct=1 --ioengine=libaio --verify=crc32c --verify_fatal=1 --output-format=json \
		--output="$VMLAB_RESULTS/fio-$1.json" 2>"$VMLAB_RESULTS/fio-$1.err" &
	FIO_PID=$!
}

fio_fill() {
	timeout -k 5 "${FIO_FAULT_TIMEOUT:-150}" fio --name="$1" --filename="$2" --offset="$3" \
		--size="$4" --randseed="$5" --rw=write --bs=64k --iodepth=16 --direct=1 --ioengine=libaio \
		--verify=crc32c --do_verify=0 --output="$VMLAB_RESULTS/fio-$1.txt" || {
		cat "$VMLAB_RESULTS/fio-$1.txt" >&2
		return 1
	}
}

fio_fault_wait() {
	_fw_rc=0
	wait "$FIO_PID" || _fw_rc=$?
	_fw_j=$VMLAB_RESULTS/fio-$1.json
	if [ "$_fw_rc" != 0 ]; then
		[ "$_fw_rc" = 124 ] && echo "fio $1: still running after ${FIO_FAULT_TIMEOUT:-150} s (hang)" >&2
		echo "fio $1: exit $_fw_rc:" >&2
		tail -n 15 "$VMLAB_RESULTS/fio-$1.err" >&2
		return 1
	fi
	_fw_r=$(sed -n '/^{/,$p' "$_fw_j" | jq -r '.jobs[0] | "\(.error) \(.write.io_bytes) \(.read.io_bytes)"') || {
		echo "fio $1: no JSON result in $_fw_j" >&2
		return 1
	}
	set -- "$1" $_fw_r
	if [ "$3" = 0 ]; then # FIO_FAULT_RW=read
		[ "$2" = 0 ] && [ "$4" = "$FIO_FAULT_READ" ] || {
			echo "fio $1: error $2, read and verified $4 bytes of $FIO_FAULT_READ" >&2
			return 1
		}
		echo "fio $1: read $4 bytes, crc32c verified"
		return 0
	fi
	[ "$2" = 0 ] && [ "$3" -gt 0 ] && [ "$4" = "$3" ] || {
		echo "fio $1: error $2, wrote $3 bytes, read back and verified $4" >&2
		return 1
	}
	echo "fio $1: wrote $3 bytes, read all back, crc32c verified"
}

io_expect_eio() {
	_ie_t0=$(date +%s)
	_ie_rc=0
	timeout -k 5 $(($4 + 10)) dd if=/dev/urandom of="$1" bs=4k count=1 seek="$2" oflag=direct \
		2>/tmp/io_expect_eio.err || _ie_rc=$?
	_ie_dt=$(($(date +%s) - _ie_t0))
	if [ "$_ie_rc" = 0 ]; then
		echo "io_expect_eio: write to $1 succeeded after $_ie_dt s" >&2
		return 1
	fi
	if [ "$_ie_rc" = 124 ] || [ "$_ie_rc" = 137 ]; then
		echo "io_expect_eio: write to $1 still hanging after $_ie_dt s" >&2
		return 1
	fi
	grep -q 'Input/output error' /tmp/io_expect_eio.err || {
		echo "io_expect_eio: write to $1 failed, but not with EIO: $(cat /tmp/io_expect_eio.err)" >&2
		return 1
	}
	[ "$_ie_dt" -ge "$3" ] && [ "$_ie_dt" -le "$4" ] || {
		echo "io_expect_eio: EIO after $_ie_dt s, expected after $3..$4 s" >&2
		return 1
	}
	echo "io_expect_eio: EIO on $1 after $_ie_dt s"
}

vol_status() {
	timeout 10 iser-attach list --json | jq -ce --arg n "$1" '.[] | select(.name == $n)'
}

vol_wait() {
	_vw_end=$(($(date +%s) + $3))
	while :; do
		_vw_st=$(vol_status "$1" 2>/dev/null) && echo "$_vw_st" | jq -e "$2" >/dev/null 2>&1 && return 0
		[ "$(date +%s)" -lt "$_vw_end" ] || break
		sleep 0.5
	done
	echo "vol_wait: volume $1 not ($2) within $3 s; status: ${_vw_st:-none}" >&2
	return 1
}

# dev_present DEV: the block device node exists and its disk has a size (a disconnected
# /dev/nbdN keeps its node but has size 0).
dev_present() {
	[ -b "$1" ] || return 1
	_dp=$(cat "/sys/block/${1#/dev/}/size" 2>/dev/null) || return 1
	[ "${_dp:-0}" -gt 0 ]
}

vol_watch() {
	set +e
	while :; do
		_vw_s=$(timeout 5 iser-attach list --json 2>/dev/null | jq -r --arg n "$1" \
			'.[] | select(.name == $n) | "\(.state) \(.recoveries) \(.faults) \(.portal)"' 2>/dev/null)
		_vw_p=present
		dev_present "$2" || _vw_p=MISSING
		echo "$(cut -d' ' -f1 /proc/uptime) ${_vw_s:-nostatus} $_vw_p" >>"$3"
		sleep 0.5
	done
}

vol_watch_start() {
	: >"$3"
	vol_watch "$@" &
	VOL_WATCH_PID=$!
}

vol_watch_stop() {
	kill "$VOL_WATCH_PID" 2>/dev/null
	wait "$VOL_WATCH_PID" 2>/dev/null
	return 0
}

vol_log_mark() {
	if [ -f "/run/iser-attach/$1.log" ]; then wc -l <"/run/iser-attach/$1.log"; else echo 0; fi
}

vol_warns() {
	_vl=/run/iser-attach/$1.log
	tail -n +$(($2 + 1)) "$_vl" | jq -c 'select(.level == "warn" or .level == "error")' \
		>/tmp/vol_warns.txt 2>/dev/null
	sed "s/^/${3:-}/" /tmp/vol_warns.txt
	grep -q '"level":"warn".*"error":"[^"]' /tmp/vol_warns.txt || {
		echo "vol_warns: no warn line with a cause (error) in $_vl since line $2" >&2
		return 1
	}
}

lio_sessions() {
	grep -c . "$LIO/iscsi/$1/tpgt_1/dynamic_sessions"
}

# survive_fault NAME DEV LABEL OFFSET SEED FAULT...: fio_fault_start on DEV (SURVIVE_SIZE,
# default 32M, at OFFSET), 3 s later FAULT... runs (it returns once the fault has healed), and
# then: fio was still running when the fault healed (so it spanned it), the volume's status
# satisfies SURVIVE_COND (a jq condition, default: attached with more recoveries than before)
# within 60 s, fio verified every write, the device node was there in every sample taken
# during the fault, state "recovering" was seen (unless SURVIVE_STATE=0), the daemon logged a
# warn line with the cause (unless SURVIVE_WARN=0) and, with SURVIVE_LIO_IQN, the LIO target
# is left with one session (the old one was reinstated, not leaked). Counts FAULTS_SURVIVED.
survive_fault() {
	_sf_name=$1 _sf_dev=$2 _sf_label=$3 _sf_off=$4 _sf_seed=$5
	shift 5
	_sf_st=$(vol_status "$_sf_name") || {
		echo "survive_fault: no status for volume $_sf_name" >&2
		return 1
	}
	_sf_r0=$(echo "$_sf_st" | jq .recoveries)
	_sf_pid0=$(echo "$_sf_st" | jq .pid)
	_sf_cond=${SURVIVE_COND:-}
	[ -n "$_sf_cond" ] || _sf_cond='.state == "attached" and .recoveries > $R0'
	_sf_cond=$(echo "$_sf_cond" | sed "s/\$R0/$_sf_r0/g; s/\$PID0/$_sf_pid0/g")
	_sf_mark=$(vol_log_mark "$_sf_name")
	_sf_watch=$VMLAB_RESULTS/watch-$_sf_label.txt
	echo "survive_fault $_sf_label: status before: $_sf_st"
	fio_fault_start "$_sf_label" "$_sf_dev" "$_sf_off" "${SURVIVE_SIZE:-32M}" "$_sf_seed"
	sleep 3
	if ! kill -0 "$FIO_PID" 2>/dev/null; then
		fio_fault_wait "$_sf_label"
		echo "survive_fault $_sf_label: fio ended before the fault" >&2
		return 1
	fi
	vol_watch_start "$_sf_name" "$_sf_dev" "$_sf_watch"
	_sf_t0=$(date +%s)
	if ! "$@"; then
		vol_watch_stop
		echo "survive_fault $_sf_label: the fault '$*' failed" >&2
		return 1
	fi
	if ! kill -0 "$FIO_PID" 2>/dev/null; then
		vol_watch_stop
		fio_fault_wait "$_sf_label"
		echo "survive_fault $_sf_label: fio ended before the fault healed: it did not stall I/O" >&2
		return 1
	fi
	if ! vol_wait "$_sf_name" "$_sf_cond" 60; then
		vol_watch_stop
		tail -n 8 "$_sf_watch" | sed 's/^/  watch: /' >&2
		return 1
	fi
	echo "survive_fault $_sf_label: recovered $(($(date +%s) - _sf_t0)) s after the fault began"
	if ! fio_fault_wait "$_sf_label"; then
		vol_watch_stop
		return 1
	fi
	vol_watch_stop
	echo "survive_fault $_sf_label: status after: $(vol_status "$_sf_name")"
	echo "survive_fault $_sf_label: states seen: $(awk '{print $2}' "$_sf_watch" | uniq | tr '\n' ' ')"
	if grep -q MISSING "$_sf_watch"; then
		echo "survive_fault $_sf_label: $_sf_dev vanished during the fault:" >&2
		grep -m 3 MISSING "$_sf_watch" >&2
		return 1
	fi
	if [ "${SURVIVE_STATE:-1}" = 1 ] && ! grep -q ' recovering ' "$_sf_watch"; then
		echo "survive_fault $_sf_label: state \"recovering\" never seen during the fault" >&2
		return 1
	fi
	if [ "${SURVIVE_WARN:-1}" = 1 ]; then
		vol_warns "$_sf_name" "$_sf_mark" "  $_sf_label log: " || return 1
	fi
	if [ -n "${SURVIVE_LIO_IQN:-}" ] && ! wait_for 15 sh -c '[ "$(grep -c . "$0")" = 1 ]' \
		"$LIO/iscsi/$SURVIVE_LIO_IQN/tpgt_1/dynamic_sessions"; then
		echo "survive_fault $_sf_label: LIO has $(lio_sessions "$SURVIVE_LIO_IQN") sessions, not 1" >&2
		return 1
	fi
	FAULTS_SURVIVED=$((${FAULTS_SURVIVED:-0} + 1))
	echo "survive_fault $_sf_label: survived (faults survived so far: $FAULTS_SURVIVED)"
}

recovery_cleanup() {
	set +e # an EXIT trap: never fail here, keep the test's own exit status
	[ -z "${VOL_WATCH_PID:-}" ] || kill "$VOL_WATCH_PID" 2>/dev/null
	[ -z "${FIO_PID:-}" ] || kill "$FIO_PID" 2>/dev/null
	for _rc_n in "$@"; do
		_rc_pid=$(vol_status "$_rc_n" 2>/dev/null | jq -r .pid 2>/dev/null)
		[ -n "$_rc_pid" ] || continue
		timeout 30 iser-attach detach --force "$_rc_n" >/dev/null 2>&1 || kill -9 "$_rc_pid" 2>/dev/null
	done
	cp /run/iser-attach/*.log "$VMLAB_RESULTS/" 2>/dev/null
	echo "faults survived: ${FAULTS_SURVIVED:-0}"
}

# --- multipath (84-multipath: one LUN behind two TPGs, two ALUA target port groups) ---
#
# Two paths need two addresses a path can lose on its own. They are /32s on rxe-net0 next to
# $VMLAB_ADDR/24, so each is its own primary address (deleting one does not take the other
# with it, as deleting a /24's primary does its secondaries) and the /24's route still covers
# a removed one: what the path sends gets no answer, and nothing refuses or resets it (a
# silent path; main's single path stalls until its keepalive and login timeouts run out).
# rxe's loopback never reaches lo or rxe-net0's qdisc, so tc, nft and iptables cannot drop
# iSER. The covering /24 avoids a failed route lookup, which (see the fault injection notes,
# link down) moves the sending QP, for RDMA CM's QP1 for good, to ERR.
: "${MP_ADDR_A:=10.99.0.11}"
: "${MP_ADDR_B:=10.99.0.12}"
export MP_ADDR_A MP_ADDR_B

mp_addr() {
	case $1 in
	1 | A | a) echo "$MP_ADDR_A" ;;
	2 | B | b) echo "$MP_ADDR_B" ;;
	*) echo "$1" ;;
	esac
}

mp_addr_add() {
	_ma=$(mp_addr "$1")
	ip -4 addr show dev rxe-net0 | grep -q "inet $_ma/32" || ip addr add "$_ma/32" dev rxe-net0
}

mp_addrs_up() {
	rxe_up || return 1
	mp_addr_add A || return 1
	mp_addr_add B || return 1
	# rxe adds a RoCE GID per address; RDMA CM needs it before a connection can use it.
	wait_for 10 sh -c 'rdma link show rxe0/1 | grep -q "state ACTIVE"'
}

mp_addrs_down() {
	for _ma in "$MP_ADDR_A" "$MP_ADDR_B"; do
		ip addr del "$_ma/32" dev rxe-net0 2>/dev/null
	done
	return 0
}

# mp_path_silent A|B 1|0: the path's address removed (silent: see above) or added again.
mp_path_silent() {
	_ms=$(mp_addr "$1")
	if [ "$2" = 1 ]; then
		ip addr del "$_ms/32" dev rxe-net0
	else
		mp_addr_add "$_ms"
	fi
}

# lio_mp_target IQN LUN: LUN (TYPE:MiB[:BS], as lio_target) exported by two TPGs of IQN,
# both with lio_target's CHAP settings (LIO_CHAP_USER ...: none without),
# tpgt_1 on $MP_ADDR_A:$LIO_PORT and tpgt_2 on $MP_ADDR_B:$LIO_PORT (iSER unless LIO_ISER=0),
# each TPG's lun_0 the member of its own ALUA target port group on the device, mp_a (id 1)
# and mp_b (id 2), implicit ALUA only (alua_access_type 1: the target changes states, STPG
# is refused), both active/optimized, nonop_delay_msecs LIO_NONOP_DELAY (LIO's default 100).
lio_mp_target() {
	_mt_iqn=$1
	_mt_save=$VMLAB_ADDR
	VMLAB_ADDR=$MP_ADDR_A
	lio_target "$_mt_iqn" "$2"
	_mt_rc=$?
	VMLAB_ADDR=$_mt_save
	[ $_mt_rc = 0 ] || return 1
	_mt=$LIO/iscsi/$_mt_iqn
	_mt_dev=$(readlink -f "$(find "$_mt/tpgt_1/lun/lun_0" -maxdepth 1 -type l | head -n1)") || return 1
	[ -d "$_mt_dev/alua" ] || {
		echo "lio_mp_target: no backstore behind $_mt/tpgt_1/lun/lun_0" >&2
		return 1
	}
	_mt2=$_mt/tpgt_2
	mkdir -p "$_mt2/lun/lun_0" || return 1
	ln -s "$_mt_dev" "$_mt2/lun/lun_0/$(basename "$_mt_dev")" || return 1
	mkdir -p "$_mt2/np/$MP_ADDR_B:$LIO_PORT" || return 1
	[ "${LIO_ISER:-1}" = 1 ] && { _lio_put "$_mt2/np/$MP_ADDR_B:$LIO_PORT/iser" 1 || return 1; }
	for _a in generate_node_acls:1 cache_dynamic_acls:1 demo_mode_write_protect:0; do
		_lio_put "$_mt2/attrib/${_a%%:*}" "${_a#*:}" || return 1
	done
	# CHAP as lio_target set it up on tpgt_1 (LIO_CHAP_USER ...), else none.
	if [ -n "${LIO_CHAP_USER:-}" ]; then
		for _a in userid password userid_mutual password_mutual; do
			_lio_put "$_mt2/auth/$_a" "$(cat "$_mt/tpgt_1/auth/$_a")" || return 1
		done
		_lio_put "$_mt2/attrib/authentication" 1 || return 1
	else
		_lio_put "$_mt2/attrib/authentication" 0 || return 1
	fi
	for _g in 1 2; do
		_gd=$_mt_dev/alua/mp_$(echo "$_g" | tr 12 ab)
		mkdir -p "$_gd" || return 1
		_lio_put "$_gd/tg_pt_gp_id" "$_g" || return 1
		_lio_put "$_gd/alua_access_type" 1 || return 1
		_lio_put "$_gd/nonop_delay_msecs" "${LIO_NONOP_DELAY:-100}" || return 1
		_lio_put "$_mt/tpgt_$_g/lun/lun_0/alua_tg_pt_gp" "$(basename "$_gd")" || return 1
	done
	_lio_put "$_mt2/enable" 1 || return 1
}

# _lio_mp_group IQN TPGT: the ALUA group directory TPGT's lun_0 is a member of.
_lio_mp_group() {
	_mg_lun=$LIO/iscsi/$1/tpgt_$2/lun/lun_0
	_mg_dev=$(readlink -f "$(find "$_mg_lun" -maxdepth 1 -type l | head -n1)") || return 1
	_mg_name=$(sed -n 's/^TG Port Alias: //p' "$_mg_lun/alua_tg_pt_gp" 2>/dev/null)
	[ -n "$_mg_name" ] || _mg_name=mp_$(echo "$2" | tr 12 ab)
	echo "$_mg_dev/alua/$_mg_name"
}

# lio_alua_state IQN TPGT STATE: set the access state of the ALUA group of TPG TPGT's LUN:
# ao (active/optimized), an (active/non-optimized), standby, unavailable, transitioning, or
# LIO's number; prints nothing, fails when LIO refuses it.
lio_alua_state() {
	case $3 in
	ao | active/optimized) _as=0 ;;
	an | active/non-optimized) _as=1 ;;
	standby) _as=2 ;;
	unavailable) _as=3 ;;
	transitioning) _as=15 ;;
	[0-9]*) _as=$3 ;;
	*)
		echo "lio_alua_state: unknown state '$3'" >&2
		return 1
		;;
	esac
	_ag=$(_lio_mp_group "$1" "$2") || return 1
	_lio_put "$_ag/alua_access_state" "$_as" || return 1
	[ "$(cat "$_ag/alua_access_state")" = "$_as" ] || {
		echo "lio_alua_state: $_ag is in state $(cat "$_ag/alua_access_state"), not $_as" >&2
		return 1
	}
}

# lio_tpgt IQN TPGT 0|1: TPG TPGT off (its sessions dropped, logins refused) or on again.
lio_tpgt() {
	_lio_put "$LIO/iscsi/$1/tpgt_$2/enable" "$3"
}

# lio_tpg_cmds IQN TPGT: SCSI commands the target received through TPG TPGT's lun_0
# (configfs statistics, scsi_tgt_port/in_cmds; refused ones count too).
lio_tpg_cmds() {
	cat "$LIO/iscsi/$1/tpgt_$2/lun/lun_0/statistics/scsi_tgt_port/in_cmds"
}

# mp_disks IQN: "PORTAL DISK" for each open-iscsi session to IQN.
mp_disks() {
	iscsiadm -m session -P 3 2>/dev/null | awk -v iqn="$1" '
		/^Target: / { t = $2 }
		/Current Portal: / { p = $3; sub(/,.*/, "", p) }
		/Attached scsi disk / && t == iqn { print p, "/dev/" $4 }'
}

# mp_rtpg_states DISK: "ID STATE" per target port group in DISK's REPORT TARGET PORT GROUPS
# (sg_rtpg -d), STATE the asymmetric access state's code as lio_alua_state numbers them (0
# active/optimized, 1 active/non-optimized, 2 standby, 3 unavailable, 15 transitioning).
# One retry: the first command after a state change may get the UNIT ATTENTION.
mp_rtpg_states() {
	for _rt in 1 2 3; do
		sg_rtpg -d "$1" >/tmp/rtpg.txt 2>&1 && break
		sleep 0.5
	done
	sed -n 's/.*target port group id *: *0x\([0-9a-fA-F]*\).*/id \1/p; s/.*asymmetric access state *: *0x\([0-9a-fA-F]*\).*/st \1/p' /tmp/rtpg.txt |
		while read -r _k _v; do
			if [ "$_k" = id ]; then _rid=$((0x$_v)); else echo "$_rid $((0x$_v))"; fi
		done
}

# mp_vpd_tpg DISK: the target port group designator of DISK's VPD page 0x83, read with sg_raw
# (bookworm's sg_inq -p 0x83 and sg_vpd -p di fail on LIO's page with "Numerical argument out
# of domain") and decoded here: designator type 5, its group number in bytes 6-7.
mp_vpd_tpg() {
	sg_raw -r 512 -o /tmp/vpd83.bin "$1" 12 01 83 02 00 00 >/dev/null 2>&1 || {
		echo "mp_vpd_tpg: INQUIRY VPD 0x83 on $1 failed" >&2
		return 1
	}
	od -An -tu1 -v /tmp/vpd83.bin | tr -s ' \n' '\n\n' | grep . | awk '{ b[n++] = $1 }
		END { len = b[2] * 256 + b[3] + 4; i = 4
			while (i + 4 <= len && i + 4 <= n) { t = b[i + 1] % 16; l = b[i + 3]
				if (t == 5) { print b[i + 6] * 256 + b[i + 7]; exit }
				i += 4 + l } }'
}

_mp_state_code() {
	case $1 in
	ao) echo 0 ;; an) echo 1 ;; standby) echo 2 ;; unavailable) echo 3 ;; transitioning) echo 15 ;; *) echo "$1" ;;
	esac
}

# mp_kernel_check IQN: with the kernel's own initiator, over iSER logins to both portals:
# standard INQUIRY (sg_inq) has TPGS=1 (implicit ALUA), VPD 0x83 (sg_vpd -p di) names target port group 1 through
# portal A and 2 through B, and sg_rtpg on either disk shows groups 1 and 2 in the states
# lio_alua_state sets, for (ao, ao), (an, standby), (unavailable, transitioning), (ao, ao).
# Logs out after.
mp_kernel_check() {
	_kc_iqn=$1
	iscsi_login "$_kc_iqn" iser "$MP_ADDR_A:$LIO_PORT" >/dev/null || return 1
	iscsi_login "$_kc_iqn" iser "$MP_ADDR_B:$LIO_PORT" >/dev/null || return 1
	wait_for 20 sh -c "[ \$(iscsiadm -m session -P 3 2>/dev/null | grep -c 'Attached scsi disk') -ge 2 ]" || {
		echo "mp_kernel_check: two sessions, but not two disks" >&2
		return 1
	}
	mp_disks "$_kc_iqn" >/tmp/mp-disks.txt
	cat /tmp/mp-disks.txt
	_kc_rc=0
	while read -r _kc_p _kc_d; do
		case $_kc_p in "$MP_ADDR_A":*) _kc_g=1 ;; "$MP_ADDR_B":*) _kc_g=2 ;; *) continue ;; esac
		sg_inq "$_kc_d" >/tmp/inq.txt 2>&1
		grep -q 'TPGS=1' /tmp/inq.txt || {
			echo "mp_kernel_check: $_kc_d ($_kc_p): standard INQUIRY without TPGS=1: $(grep TPGS /tmp/inq.txt)" >&2
			_kc_rc=1
		}
		_kc_vg=$(mp_vpd_tpg "$_kc_d")
		echo "$_kc_d via $_kc_p: $(grep -o 'TPGS=[0-9]' /tmp/inq.txt), VPD 0x83 target port group $_kc_vg"
		[ "$_kc_vg" = "$_kc_g" ] || {
			echo "mp_kernel_check: $_kc_d ($_kc_p): VPD 0x83 target port group '${_kc_vg}', want $_kc_g" >&2
			_kc_rc=1
		}
	done </tmp/mp-disks.txt
	for _kc_s in ao:ao an:standby unavailable:transitioning ao:ao; do
		lio_alua_state "$_kc_iqn" 1 "${_kc_s%:*}" || return 1
		lio_alua_state "$_kc_iqn" 2 "${_kc_s#*:}" || return 1
		_kc_want="$(_mp_state_code "${_kc_s%:*}") $(_mp_state_code "${_kc_s#*:}")"
		while read -r _kc_p _kc_d; do
			mp_rtpg_states "$_kc_d" >/tmp/rtpg-states.txt
			_kc_a=$(sed -n 's/^1 //p' /tmp/rtpg-states.txt)
			_kc_b=$(sed -n 's/^2 //p' /tmp/rtpg-states.txt)
			echo "sg_rtpg $_kc_d via $_kc_p after $_kc_s: group 1 state $_kc_a, group 2 state $_kc_b"
			[ "$_kc_a $_kc_b" = "$_kc_want" ] || {
				echo "mp_kernel_check: sg_rtpg on $_kc_d: want states $_kc_want:" >&2
				cat /tmp/rtpg.txt >&2
				_kc_rc=1
			}
		done </tmp/mp-disks.txt
	done
	iscsi_logout_all || return 1
	return $_kc_rc
}
