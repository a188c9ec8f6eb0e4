// Package discovery finds targets with SendTargets (RFC 7143 section 12.3 and
// Appendix D) over a discovery session on iSCSI/TCP, CHAP included. Discovery
// always runs over TCP, also for targets reached later over iSER.
//
// ParseSendTargets and ParsePortal are pure; SendTargets opens a discovery
// session, asks SendTargets=All, logs out and returns the targets in the
// order the target listed them; a login with credentials refused for
// authentication is tried once more without them (see SendTargets).
package discovery
