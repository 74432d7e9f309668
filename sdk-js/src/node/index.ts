/** Node adapters of @specsteer/device: an audit log directory (read and written), its keys, and a model bundle folder on `fs`. */
export { deviceIdentity, loadSigningKey, loadWitnessKey, logDirectory, logStorage } from "./files.js";
export { bundleFolder, cacheRoot, defaultBundlePath, modelFactsOf, openBundleFolder, promptRendererOf } from "./bundle.js";
export { loadOnnxDrafter } from "./drafter.js";
export { GrpcTransport, loadPinSet, spkiPin, PinningError, type GrpcTransportOptions } from "./grpc.js";
