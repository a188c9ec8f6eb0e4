// Package isertest is an in-memory fake RDMA endpoint with a fake iSER
// target behind it, for unit tests of the iSER datamover. It checks what a
// real RC connection and a Linux target would enforce: lkeys and rkeys,
// bounds of every SGE and remote access, a posted receive for every SEND
// (else RNR), and that the initiator never sends Data-Out over iSER.
//
// The target serves a RAM disk of 512-byte blocks at LUN 1: READ(10/16),
// WRITE(10/16) with immediate data and RDMA READ of the rest, and answers
// login by accepting what the initiator offers.
package isertest
