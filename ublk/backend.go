package ublk

import "github.com/iser-attach/iser-attach/blockdev"

// Backend is the block device a ublk device serves: the frontends' shared
// contract (blockdev.Backend). A request fails with the errno its error
// carries (blockdev.Errno) when the block layer has a status for it
// (EIO, ENOSPC, EOPNOTSUPP, ENODATA, EILSEQ, ENOLINK, EREMOTEIO, ETIMEDOUT,
// EBADE); anything else becomes EIO.
type Backend = blockdev.Backend
