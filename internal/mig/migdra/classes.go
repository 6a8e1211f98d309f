package migdra

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// ClassName is the DeviceClass of one profile, e.g. "mig-1g.10gb.mig.slicer.dev".
func ClassName(profile string) string {
	return "mig-" + mig.LegalProfileName(profile) + "." + DriverName
}

// ProfileSelector is the CEL expression that selects the devices of one profile.
func ProfileSelector(profile string) string {
	return fmt.Sprintf("device.driver == %q && device.attributes[%q].%s == %q && device.attributes[%q].%s == %q",
		DriverName, DriverName, AttrType, "mig", DriverName, AttrProfile, profile)
}

// DeviceClasses renders one class per profile name. With extendedResources the class also
// names the profile's NVIDIA resource (nvidia.com/mig-<profile>), so the stock scheduler
// serves pods that ask for it with no claim (the extended-resource bridge; leave it false on
// clusters without it). Profiles are deduplicated and sorted.
func DeviceClasses(profiles []string, extendedResources bool) ([]resourceapi.DeviceClass, error) {
	names := map[string]bool{}
	for _, p := range profiles {
		n, err := mig.ParseProfileName(p)
		if err != nil {
			return nil, err
		}
		names[n] = true
	}
	var sorted []string
	for n := range names {
		sorted = append(sorted, n)
	}
	sorted = mig.SortSlices(sorted)
	out := make([]resourceapi.DeviceClass, 0, len(sorted))
	for _, n := range sorted {
		c := resourceapi.DeviceClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
			ObjectMeta: metav1.ObjectMeta{Name: ClassName(n)},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: ProfileSelector(n)},
			}}},
		}
		if extendedResources {
			c.Spec.ExtendedResourceName = ptr.To(mig.NVIDIAResourceName(n))
		}
		out = append(out, c)
	}
	return out, nil
}

// WholeClassName is the DeviceClass of whole GPUs.
const WholeClassName = "gpu." + DriverName

// WholeSelector is the CEL expression that selects the whole-GPU devices.
func WholeSelector() string {
	return fmt.Sprintf("device.driver == %q && device.attributes[%q].%s == %q", DriverName, DriverName, AttrType, "gpu")
}

// WholeDeviceClass renders the class of whole GPUs (WholeGPUDeviceName's devices). With
// extendedResources it names nvidia.com/gpu (migapi.NVIDIAGPUResource), so the stock scheduler
// serves a pod that asks for nvidia.com/gpu with no claim on a node where no device plugin
// advertises that resource; where one does (NVIDIA's), the device plugin serves it.
func WholeDeviceClass(extendedResources bool) resourceapi.DeviceClass {
	c := resourceapi.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: WholeClassName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: WholeSelector()},
		}}},
	}
	if extendedResources {
		c.Spec.ExtendedResourceName = ptr.To(migapi.NVIDIAGPUResource)
	}
	return c
}

// ProfileOfClass is the profile a class of DeviceClasses selects, or false.
func ProfileOfClass(class string) (string, bool) {
	rest, ok := strings.CutPrefix(class, "mig-")
	if !ok {
		return "", false
	}
	legal, ok := strings.CutSuffix(rest, "."+DriverName)
	if !ok {
		return "", false
	}
	n, err := mig.ParseProfileName(legal)
	return n, err == nil
}
