// AudioWorklet: microphone (or any) audio at the context's rate -> 16 kHz mono PCM16 frames.
// Each output sample is the mean of the input samples in its 1/16000 s window (a box filter
// against aliasing, then decimation); a frame of FRAME samples (100 ms) is posted as an
// ArrayBuffer of little-endian int16, ready to send on the session's WebSocket.
const TARGET_RATE = 16000;
const FRAME = 1600;

class PcmEncoder extends AudioWorkletProcessor {
  constructor() {
    super();
    this.step = sampleRate / TARGET_RATE; // input samples per output sample (>= 1)
    this.phase = 0; // input samples gathered for the current output sample
    this.sum = 0;
    this.out = new Int16Array(FRAME);
    this.filled = 0;
  }

  process(inputs) {
    const channels = inputs[0];
    if (!channels || channels.length === 0) return true;
    const n = channels[0].length;
    for (let i = 0; i < n; i++) {
      let x = 0;
      for (const channel of channels) x += channel[i];
      this.sum += x / channels.length;
      this.phase += 1;
      if (this.phase >= this.step) {
        const mean = Math.max(-1, Math.min(1, this.sum / this.phase));
        this.out[this.filled++] = mean < 0 ? mean * 0x8000 : mean * 0x7fff;
        this.phase -= this.step;
        this.sum = 0;
        if (this.filled === FRAME) {
          this.port.postMessage(this.out.buffer, [this.out.buffer]);
          this.out = new Int16Array(FRAME);
          this.filled = 0;
        }
      }
    }
    return true;
  }
}

registerProcessor("pcm-encoder", PcmEncoder);
