package migdra

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// PartitionableProbe is a ResourceSlice with one counter-consuming device, to create with
// server-side dry run: an apiserver whose partitionable-devices feature is off accepts it but
// drops the fields it does not serve, which PartitionableServed detects. Counter sets and
// devices live in separate slices, so the probe is the device half; the apiserver does not
// check that the counter set exists.
func PartitionableProbe(nodeName string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "slicer-partitionable-probe-"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   DriverName,
			NodeName: ptr.To(nodeName),
			Pool:     resourceapi.ResourcePool{Name: "slicer-partitionable-probe", ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{
				Name: "probe",
				ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
					CounterSet: CounterSetName(0),
					Counters:   map[string]resourceapi.Counter{CounterCompute: {Value: *resource.NewQuantity(1, resource.DecimalSI)}},
				}},
			}},
		},
	}
}

// PartitionableServed reports whether the apiserver kept the probe's counter consumption,
// i.e. serves partitionable devices.
func PartitionableServed(created *resourceapi.ResourceSlice) bool {
	return created != nil && len(created.Spec.Devices) == 1 && len(created.Spec.Devices[0].ConsumesCounters) == 1
}
