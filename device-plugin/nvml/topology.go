package nvml

import "fmt"

// Link is how NVML says two GPUs are connected.
type Link struct {
	// Level is their common ancestor in the PCIe tree.
	Level TopologyLevel
	// NVLink is whether they are NVLink peers.
	NVLink bool
}

// ReadLinks reads the link between every ordered pair of devs: links[i][j] for i != j (the
// diagonal is the zero Link). A pair NVML cannot answer for (ERROR_NOT_SUPPORTED: nvml.h
// says the OS may not tell) reads as the farthest link, TopologySystem without NVLink, so
// that a machine without topology still ranks, just without preference; any other error
// is returned.
func ReadLinks(devs []Device) ([][]Link, error) {
	links := make([][]Link, len(devs))
	for i := range devs {
		links[i] = make([]Link, len(devs))
		for j := range devs {
			if i == j {
				continue
			}
			level, err := devs[i].TopologyCommonAncestor(devs[j])
			switch {
			case ReturnOf(err) == ErrorNotSupported:
				level = TopologySystem
			case err != nil:
				return nil, fmt.Errorf("topology of GPUs %d and %d: %w", i, j, err)
			}
			nvlink, err := devs[i].NVLinkPeer(devs[j])
			switch {
			case ReturnOf(err) == ErrorNotSupported:
				nvlink = false
			case err != nil:
				return nil, fmt.Errorf("NVLink of GPUs %d and %d: %w", i, j, err)
			}
			links[i][j] = Link{Level: level, NVLink: nvlink}
		}
	}
	return links, nil
}
