package main

// createLinks makes /dev/iser/NAME (and the by-WWN link) point at the
// device and returns the name link. Filled in with volume.CreateLinks.
func createLinks(name, device, wwn string) (string, error) { return "", nil }

// removeLinks removes the links createLinks made, if they still point at
// the device.
func removeLinks(name, device, wwn string) {}
