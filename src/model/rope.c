/* Rotary position embedding frequencies (Su et al. 2021, RoFormer) and their context-extension
 * variants, as transformers' modeling_rope_utils computes them:
 *   default  theta_i = base^(-2i/d)
 *   linear   theta_i / factor                                   (position interpolation, Chen et al. 2023)
 *   llama3   low frequencies divided by factor, high ones kept, a smooth ramp between
 *   yarn     a ramp between interpolation and extrapolation over the correction range, and
 *            cos/sin scaled by 0.1 ln(factor) + 1                (Peng et al. 2023, YaRN)
 *   longrope theta_i / ext_factor_i, cos/sin scaled by sqrt(1 + ln(factor) / ln(original))
 * d is the rotated dimension count n_rot. Per-frequency divisors from the file (GGUF rope_freqs,
 * which is how llama.cpp's converter stores Llama 3's scaling, or LongRoPE's factors) apply on top. */
#include <math.h>

#include "model/model.h"

/* YaRN: the dimension whose wavelength makes num_rot rotations over the original context. */
static double correction_dim(double num_rot, int d, double base, double orig_ctx) {
    return d * log(orig_ctx / (num_rot * 2 * M_PI)) / (2 * log(base));
}

double model_rope_freqs(const model_rope *r, int n_rot, int n_ctx, double *inv_freq) {
    int half = n_rot / 2;
    double scale = 1.0;
    double low = 0, high = 0;
    if (r->kind == ROPE_YARN) {
        low = correction_dim(r->beta_fast, n_rot, r->base, r->orig_ctx);
        high = correction_dim(r->beta_slow, n_rot, r->base, r->orig_ctx);
        if (!r->exact_range) {
            low = floor(low);
            high = ceil(high);
        }
        low = low > 0 ? low : 0;
        high = high < n_rot - 1 ? high : n_rot - 1;
        if (low == high) high += 0.001; /* transformers' guard against a zero-width ramp */
        scale = r->attn_factor > 0 ? r->attn_factor : r->factor > 1 ? 0.1 * log(r->factor) + 1.0 : 1.0;
    } else if (r->kind == ROPE_LONGROPE) {
        scale = r->attn_factor > 0 ? r->attn_factor
              : r->factor > 1     ? sqrt(1 + log(r->factor) / log(r->orig_ctx))
                                  : 1.0;
    }
    for (int i = 0; i < half; i++) {
        double f = pow(r->base, -2.0 * i / n_rot);
        switch (r->kind) {
        case ROPE_LINEAR: f /= r->factor; break;
        case ROPE_LLAMA3: {
            double wavelen = 2 * M_PI / f, low_wl = r->orig_ctx / r->low_freq_factor,
                   high_wl = r->orig_ctx / r->high_freq_factor;
            if (wavelen > low_wl) f /= r->factor;
            else if (wavelen >= high_wl) { /* medium frequencies: interpolate */
                double s = (r->orig_ctx / wavelen - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
                f = (1 - s) * f / r->factor + s * f;
            }
            break;
        }
        case ROPE_YARN: {
            double ramp = (i - low) / (high - low);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            double extrapolate = 1 - ramp; /* share of the original frequency */
            f = f / r->factor * (1 - extrapolate) + f * extrapolate;
            break;
        }
        default: break;
        }
        /* LongRoPE's long factors serve contexts past the original one (llama.cpp decides by the
         * context size, transformers by the current length: the size is what we know up front) */
        const float *div = r->long_factors && n_ctx > r->orig_ctx ? r->long_factors : r->freq_factors;
        if (div) f /= (double)div[i];
        inv_freq[i] = f;
    }
    return scale;
}
