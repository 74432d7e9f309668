/**
 * @specsteer/device: the SpecSteer device in TypeScript, held to the Python device by
 * conformance/v1. This entry point is the platform-neutral core (no Node module): wire frames, the
 * session contract, the decision rules, the audit log (its writer, the egress recorder and its
 * verifier) and the model bundle's checks. Node adapters (file storage, keys) are in "@specsteer/device/node".
 */
export * from "./errors.js";
export * from "./limits.js";
export * from "./wire.js";
export * from "./contract.js";
export * from "./steering.js";
export * from "./sampling.js";
export * from "./repetition.js";
export * from "./merkle.js";
export * from "./note.js";
export * from "./witness.js";
export * from "./bundle.js";
export * from "./model_facts.js";
export * from "./audit/records.js";
export * from "./audit/scan.js";
export * from "./audit/verify.js";
export * from "./audit/log.js";
export * from "./audit/recorder.js";
export { fromHex, toHex, toBase64, fromBase64 } from "./bytes.js";
export * from "./prompt.js";
export * from "./drafter.js";
export * from "./retrieval.js";
export * from "./transport.js";
export * from "./session.js";
export * from "./guard/index.js";
