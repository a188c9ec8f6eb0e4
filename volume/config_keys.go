package volume

import "sort"

// ConfigKeys is every key a volume configuration file may hold, sorted
// (the manual iser-attach.conf(5) describes each; a test checks it).
func ConfigKeys() []string {
	keys := make([]string, 0, len(configKeys))
	for k := range configKeys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
