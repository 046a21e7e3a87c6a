package inventory

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// ErrNoNVML says that the NVIDIA management library is not on this host.
var ErrNoNVML = errors.New("NVML is not available")

// NVMLGPUs reads the GPUs through NVML, which go-nvml loads at run time: on
// a host without the NVIDIA driver it answers ErrNoNVML instead of failing.
func NVMLGPUs() (gpus []nodusv1.NodeGPU, err error) {
	defer func() {
		// go-nvml panics when the library cannot be loaded on some systems.
		if r := recover(); r != nil {
			gpus, err = nil, fmt.Errorf("%w: %v", ErrNoNVML, r)
		}
	}()
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: %s", ErrNoNVML, nvml.ErrorString(ret))
	}
	defer nvml.Shutdown()
	driver, ret := nvml.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML driver version: %s", nvml.ErrorString(ret))
	}
	count, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML device count: %s", nvml.ErrorString(ret))
	}
	for i := 0; i < count; i++ {
		device, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d: %s", i, nvml.ErrorString(ret))
		}
		name, ret := device.GetName()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d name: %s", i, nvml.ErrorString(ret))
		}
		memory, ret := device.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d memory: %s", i, nvml.ErrorString(ret))
		}
		mib := int64(memory.Total / (1 << 20))
		gpus = append(gpus, nodusv1.NodeGPU{Type: NormalizeGPU(name, mib), MemoryMiB: mib, Driver: driver})
	}
	return gpus, nil
}
