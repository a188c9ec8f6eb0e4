package main

import (
	"path/filepath"

	"github.com/iser-attach/iser-attach/volume"
)

// createLinks makes /dev/iser/NAME (and /dev/iser/by-wwn/WWN when the LUN
// has a WWN) point at the device and returns the name link.
func createLinks(name, device, wwn string) (string, error) {
	if err := volume.CreateLinks(name, device, wwn); err != nil {
		return "", err
	}
	return filepath.Join(volume.LinkDir, name), nil
}

// removeLinks removes the links createLinks made, if they still point at
// the device.
func removeLinks(name, device, wwn string) {
	if err := volume.RemoveLinks(name, device, wwn); err != nil {
		logger.Warn().Err(err).Str("volume", name).Msg("remove stable device names")
	}
}
