/** React Native adapters of @specsteer/device: a model bundle through the app's file module, and the
 * ONNX drafter on onnxruntime-react-native. The transport is the app's (`Transport` in
 * src/transport.ts, over a native gRPC bridge), the log's storage too (`LogStorage`). */
export { deviceBundleFiles, deviceModelFacts, devicePromptRenderer, openDeviceBundle, type DeviceDirItem, type DeviceFileModule } from "./files.js";
export { loadDeviceDrafter, type DeviceDrafterOptions } from "./drafter.js";
