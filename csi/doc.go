// Package csi is iser-attach's Container Storage Interface (CSI v1.11)
// plugin: the Identity service, the Node service and a Controller service that hands out a
// pool of pre-carved LUNs of one target. It creates nothing on the target:
// CreateVolume takes the smallest free LUN of at least the requested size
// and records the allocation in a state directory; DeleteVolume frees it.
//
// The plugin's name is PluginName ("iser-attach.io"). A volume ID
// (VolumeID) carries the target, the LUN and the LU's identity (VPD page
// 0x83), so a node needs no controller state to find its LUN. The Node
// service stages a volume through an Attacher (iser-attach attach
// --daemon, whose daemon outlives the plugin), makes and mounts its
// filesystem and bind-mounts it into pods; everything it does to the node
// goes through NodeOS (HostOS is the real one), and what it staged is
// recorded in the state directory's node/ for the next plugin. See
// docs/kubernetes.md.
//
// The package does not log in itself: the caller scans the pool (REPORT
// LUNS, READ CAPACITY, VPD 0x83 through the initiator package) and gives
// NewController the LUs it found.
package csi
