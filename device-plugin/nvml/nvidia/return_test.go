package nvidia_test

import (
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
)

// The return codes the agent distinguishes are NVML's nvmlReturn_t values, as go-nvml spells
// them: the adapter converts by value, so a wrong constant turns a real driver's answer into
// another code (ERROR_INSUFFICIENT_RESOURCES was once 7, NVML's ERROR_INSUFFICIENT_SIZE).
func TestReturnCodesAreNVMLs(t *testing.T) {
	for _, tc := range []struct {
		ours   nvml.Return
		nvidia gonvml.Return
	}{
		{nvml.Success, gonvml.SUCCESS},
		{nvml.ErrorUninitialized, gonvml.ERROR_UNINITIALIZED},
		{nvml.ErrorInvalidArgument, gonvml.ERROR_INVALID_ARGUMENT},
		{nvml.ErrorNotSupported, gonvml.ERROR_NOT_SUPPORTED},
		{nvml.ErrorNoPermission, gonvml.ERROR_NO_PERMISSION},
		{nvml.ErrorNotFound, gonvml.ERROR_NOT_FOUND},
		{nvml.ErrorInsufficientResource, gonvml.ERROR_INSUFFICIENT_RESOURCES},
		{nvml.ErrorDriverNotLoaded, gonvml.ERROR_DRIVER_NOT_LOADED},
		{nvml.ErrorLibraryNotFound, gonvml.ERROR_LIBRARY_NOT_FOUND},
		{nvml.ErrorGPUIsLost, gonvml.ERROR_GPU_IS_LOST},
		{nvml.ErrorInUse, gonvml.ERROR_IN_USE},
		{nvml.ErrorUnknown, gonvml.ERROR_UNKNOWN},
	} {
		if int(tc.ours) != int(tc.nvidia) {
			t.Errorf("%s = %d, NVML's value is %d", tc.ours, int(tc.ours), int(tc.nvidia))
		}
	}
}
