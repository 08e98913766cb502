//! The worked example's picture as a person sees it: rendered by headless Chromium (Debian's
//! `chromium`, installed by `scripts/setup`; `FENCING_CHROMIUM` names another binary) to a
//! PNG, and checked for what a reader would look for: it renders without an error, both
//! workers' lanes are there, and so is the refusal of A's confirm of r_815, in the SVG's text
//! and as ink where the picture says it drew them.

use std::path::{Path, PathBuf};
use std::process::Command;

use fencing_simulation::Fencing;
use fencing_simulation::settlement::{self, GatewayMode, SettlementConfig};
use fencing_timeline::{Part, Picture, Region};

const REFUSAL: &str = "REFUSED by refunds: confirm r_815 with token 33: fence is 34";

fn chromium() -> String {
    let binary = std::env::var("FENCING_CHROMIUM").unwrap_or_else(|_| "chromium".to_owned());
    match Command::new(&binary).arg("--version").output() {
        Ok(out) if out.status.success() => binary,
        other => panic!(
            "no headless browser: `{binary} --version` gave {other:?}. Run scripts/setup (it \
             installs Debian's chromium) or set FENCING_CHROMIUM to a Chromium binary."
        ),
    }
}

/// Runs Chromium headless on `page` with `args`, in a profile of its own.
fn run_chromium(dir: &Path, page: &Path, args: &[String]) -> std::process::Output {
    let profile = dir.join(format!("profile-{}", args.len()));
    let output = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("start chromium");
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

struct Png {
    width: u32,
    height: u32,
    rgb: Vec<u8>,
}

impl Png {
    fn read(path: &Path) -> Png {
        let decoder = png::Decoder::new(std::io::BufReader::new(
            std::fs::File::open(path).expect("the screenshot exists"),
        ));
        let mut reader = decoder.read_info().expect("a PNG");
        let mut buf = vec![0; reader.output_buffer_size().expect("a size")];
        let info = reader.next_frame(&mut buf).expect("a frame");
        let channels = info.color_type.samples();
        assert!(channels >= 3, "a colour screenshot: {:?}", info.color_type);
        let rgb = buf[..info.buffer_size()]
            .chunks(channels)
            .flat_map(|px| px[..3].to_vec())
            .collect();
        Png {
            width: info.width,
            height: info.height,
            rgb,
        }
    }

    fn pixel(&self, x: i32, y: i32) -> [u8; 3] {
        let i = 3 * (y as usize * self.width as usize + x as usize);
        [self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]]
    }

    /// The pixels of `region` that satisfy `pick`.
    fn count(&self, region: &Region, pick: impl Fn([u8; 3]) -> bool) -> usize {
        let mut n = 0;
        for y in region.y..region.y + region.height {
            for x in region.x..region.x + region.width {
                n += usize::from(pick(self.pixel(x, y)));
            }
        }
        n
    }
}

fn region(picture: &Picture, pick: impl Fn(&Part) -> bool) -> &Region {
    picture
        .regions()
        .iter()
        .find(|r| pick(&r.part))
        .unwrap_or_else(|| panic!("no such part in {:?}", picture.regions()))
}

fn blueish([r, g, b]: [u8; 3]) -> bool {
    b > 120 && r < 120 && g < 150
}

fn reddish([r, g, b]: [u8; 3]) -> bool {
    r > 150 && g < 90 && b < 90
}

fn not_white([r, g, b]: [u8; 3]) -> bool {
    r < 230 || g < 230 || b < 230
}

fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(fencing_testkit::unique_name("timeline"));
    std::fs::create_dir_all(&dir).expect("a folder for the rendering");
    dir
}

#[tokio::test(start_paused = true)]
async fn the_worked_examples_picture_renders_in_a_browser_with_both_lanes_and_the_refusal() {
    let config = SettlementConfig::worked_example(Fencing::On, GatewayMode::Idempotent);
    let report = settlement::run(&config, settlement_job::Settle).await;
    let picture = Picture::draw(&fencing_timeline::settlement(&config, &report)).unwrap();
    let dir = out_dir();
    let svg = dir.join("worked-example.svg");
    picture.save(&svg).unwrap();

    // The document as the browser parsed it: an SVG with no parser error, and the words.
    let dom = run_chromium(&dir, &svg, &["--dump-dom".to_owned()]);
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.contains("<svg"),
        "the browser did not load an SVG: {dom:.300}"
    );
    assert!(
        !dom.contains("parsererror"),
        "the browser found an error: {dom:.2000}"
    );
    for text in [
        "worker A",
        "worker B",
        "lease, token 33",
        "lease, token 34",
        REFUSAL,
    ] {
        assert!(
            dom.contains(text),
            "{text:?} is not in the rendered document"
        );
    }

    // The pixels, where the picture says it drew each part.
    let (width, height) = picture.size();
    let png = dir.join("worked-example.png");
    run_chromium(
        &dir,
        &svg,
        &[
            format!("--window-size={width},{height}"),
            format!("--screenshot={}", png.display()),
        ],
    );
    let image = Png::read(&png);
    assert_eq!((image.width, image.height), (width, height));
    let lane =
        |name: &'static str| move |p: &Part| matches!(p, Part::Lane { lane } if lane == name);
    for name in ["worker A", "worker B"] {
        let area = region(&picture, lane(name));
        assert!(
            image.count(area, not_white) > 2_000,
            "{name}'s lane is blank in {}",
            png.display()
        );
    }
    for token in ["33", "34"] {
        let bar = region(
            &picture,
            |p| matches!(p, Part::Tenure { token: t, .. } if t == token),
        );
        let blue = image.count(bar, blueish);
        assert!(
            blue * 2 > (bar.width * bar.height) as usize,
            "the lease bar of token {token} is not drawn at {bar:?} ({blue} blue pixels) in {}",
            png.display()
        );
    }
    let refusal = region(
        &picture,
        |p| matches!(p, Part::Moment { lane, label } if lane == "worker A" && label == REFUSAL),
    );
    let red = image.count(refusal, reddish);
    assert!(
        red > 100,
        "the refusal at r_815 is not drawn at {refusal:?} ({red} red pixels) in {}",
        png.display()
    );
    // And the check can fail: right of B's lease, inside B's lane, nothing red was drawn.
    let b_bar = region(
        &picture,
        |p| matches!(p, Part::Tenure { token, .. } if token == "34"),
    );
    let beyond = Region {
        part: Part::Lane {
            lane: "worker B".to_owned(),
        },
        x: b_bar.x + b_bar.width + 4,
        y: b_bar.y,
        width: 20,
        height: b_bar.height,
    };
    assert_eq!(image.count(&beyond, reddish), 0);
    assert_eq!(image.count(&beyond, blueish), 0);
    println!("rendered: {}", png.display());
}
