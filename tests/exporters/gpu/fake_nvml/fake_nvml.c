/*
 * A tiny stand-in for libnvidia-ml.so.1, so a test can drive the real pynvml ctypes code (library
 * loading, symbol lookup, structure layouts, return codes) on a machine without a GPU.
 *
 * Two GPUs, values in the H100 capture's range. Only the calls named in the issue exist (init,
 * count, handles, name, UUID, PCI info, utilization, memory, temperature, power, clocks, driver
 * version) plus nvmlDeviceGetFieldValues for two fields (memory temperature as an unsigned int,
 * PCIe replays as an unsigned long long; any other field answers NOT_SUPPORTED in its slot), to
 * exercise the value-union decoding; every other symbol is missing, so pynvml answers NVML_ERROR_FUNCTION_NOT_FOUND for it,
 * which the collector must treat as "not supported" (series absent, never 0).
 *
 * Build: gcc -shared -fPIC -o libnvidia-ml.so.1 fake_nvml.c
 * FAKE_NVML_LOST=<index> makes that GPU answer NVML_ERROR_GPU_IS_LOST (15) after discovery.
 */
#include <stdlib.h>
#include <string.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_GPU_IS_LOST 15

typedef struct {
    int index;
    const char *name;
    const char *uuid;
    const char *bus_id;
    unsigned int util_gpu, util_mem;
    unsigned long long total, reserved, used;
    unsigned int temp, power_mw, sm_mhz, mem_mhz;
} fake_device;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    int valueType;
    int nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

#define MIB (1024ULL * 1024ULL)

static fake_device devices[2] = {
    {0, "NVIDIA H100 80GB HBM3", "GPU-fa6e0000-0000-0000-0000-000000000000", "00000000:18:00.0",
     100, 11, 81559 * MIB, 479 * MIB, 19818 * MIB, 59, 629450, 1980, 2619},
    {1, "NVIDIA H100 80GB HBM3", "GPU-fa6e0001-0000-0000-0000-000000000001", "00000000:2A:00.0",
     0, 0, 81559 * MIB, 479 * MIB, 0, 31, 71200, 345, 2619},
};
static int initialized = 0;

static int lost(fake_device *d) {
    const char *env = getenv("FAKE_NVML_LOST");
    return env && atoi(env) == d->index;
}

#define CHECK(d)                                                  \
    do {                                                          \
        if (!initialized) return NVML_ERROR_UNINITIALIZED;        \
        if ((d) == NULL) return NVML_ERROR_INVALID_ARGUMENT;      \
        if (lost(d)) return NVML_ERROR_GPU_IS_LOST;               \
    } while (0)

static void copy(char *dst, unsigned int size, const char *src) {
    strncpy(dst, src, size);
    if (size) dst[size - 1] = '\0';
}

int nvmlInitWithFlags(unsigned int flags) { (void)flags; initialized = 1; return NVML_SUCCESS; }
int nvmlInit_v2(void) { initialized = 1; return NVML_SUCCESS; }
int nvmlShutdown(void) { initialized = 0; return NVML_SUCCESS; }
const char *nvmlErrorString(int result) { (void)result; return "fake NVML error"; }

int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    copy(version, length, "590.48.01");
    return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    *count = 2;
    return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, fake_device **device) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (index >= 2) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

int nvmlDeviceGetName(fake_device *d, char *name, unsigned int length) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    copy(name, length, d->name);
    return NVML_SUCCESS;
}

int nvmlDeviceGetUUID(fake_device *d, char *uuid, unsigned int length) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    copy(uuid, length, d->uuid);
    return NVML_SUCCESS;
}

int nvmlDeviceGetPciInfo_v3(fake_device *d, nvmlPciInfo_t *pci) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    memset(pci, 0, sizeof(*pci));
    copy(pci->busIdLegacy, sizeof(pci->busIdLegacy), d->bus_id + 4);
    copy(pci->busId, sizeof(pci->busId), d->bus_id);
    pci->pciDeviceId = 0x233010DE;
    return NVML_SUCCESS;
}

int nvmlDeviceGetUtilizationRates(fake_device *d, nvmlUtilization_t *util) {
    CHECK(d);
    util->gpu = d->util_gpu;
    util->memory = d->util_mem;
    return NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo_v2(fake_device *d, nvmlMemory_v2_t *mem) {
    CHECK(d);
    if (mem->version != 0x02000028) return NVML_ERROR_INVALID_ARGUMENT;
    mem->total = d->total;
    mem->reserved = d->reserved;
    mem->used = d->used;
    mem->free = d->total - d->reserved - d->used;
    return NVML_SUCCESS;
}

int nvmlDeviceGetTemperature(fake_device *d, int sensor, unsigned int *temp) {
    CHECK(d);
    if (sensor != 0) return NVML_ERROR_NOT_SUPPORTED;
    *temp = d->temp;
    return NVML_SUCCESS;
}

int nvmlDeviceGetPowerUsage(fake_device *d, unsigned int *power) {
    CHECK(d);
    *power = d->power_mw;
    return NVML_SUCCESS;
}

int nvmlDeviceGetClockInfo(fake_device *d, int type, unsigned int *clock) {
    CHECK(d);
    if (type == 1) *clock = d->sm_mhz;
    else if (type == 2) *clock = d->mem_mhz;
    else return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

int nvmlDeviceGetFieldValues(fake_device *d, int count, nvmlFieldValue_t *values) {
    CHECK(d);
    for (int i = 0; i < count; i++) {
        values[i].timestamp = 1;
        values[i].latencyUsec = 0;
        if (values[i].fieldId == 82) { /* NVML_FI_DEV_MEMORY_TEMP */
            values[i].valueType = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
            values[i].value.uiVal = d->temp - 4;
            values[i].nvmlReturn = NVML_SUCCESS;
        } else if (values[i].fieldId == 94) { /* NVML_FI_DEV_PCIE_REPLAY_COUNTER */
            values[i].valueType = 3; /* NVML_VALUE_TYPE_UNSIGNED_LONG_LONG */
            values[i].value.ullVal = 9ULL + (unsigned long long)d->index;
            values[i].nvmlReturn = NVML_SUCCESS;
        } else {
            values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}
